"""What a model represents: sparse autoencoders on its residual stream (`sae.py`), their training
(`training.py`) and quality (`quality.py`)."""
