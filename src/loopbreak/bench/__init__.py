"""``loopbreak bench``: the engine's throughput and cost per delta against peers
(``throughput``), the inputs that could make it crawl (``adversarial``), its cost per decode
step inside a real model's generation (``in_engine``), and the proxy under load (``proxy``)."""
