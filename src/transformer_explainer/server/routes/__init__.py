"""The API's routers: the core (`/api`), the analyses (`/api/analysis`), the encoder-decoder (`/api/seq2seq`)."""
