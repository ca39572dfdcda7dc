"""Media URLs for judges of canned answers: nothing is served behind them."""

from __future__ import annotations

from harness.payloads.chat import MediaURLs

URLS = MediaURLs(
    "http://127.0.0.1:1/i.png",
    "data:image/png;base64,AA==",
    "http://127.0.0.1:1/v.mp4",
    "data:video/mp4;base64,AA==",
    "http://127.0.0.1:1/missing.png",
    files={},
)
