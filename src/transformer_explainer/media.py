"""The API's own media type for binary answers (see encoding.py). Its own module, free of numpy and torch,
because the server's gzip settings (server/pages.py) name it before the model is loaded."""

from __future__ import annotations

BINARY_MEDIA_TYPE = "application/x-te-binary"
