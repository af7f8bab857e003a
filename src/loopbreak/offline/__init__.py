"""Offline work over recorded sessions and corpora: reading session logs (``transcripts``),
judging them (``analyze``) and drawing the HTML report (``report``), calibrating the defaults
(``calibrate``) on the labelled corpora (``corpus``). Nothing here runs on a live stream."""
