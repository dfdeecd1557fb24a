"""What this project knows of the Hugging Face hub: the GPT-2 checkpoints it offers by short name (their
repos, sizes and download sizes), and the files of a model repo it fetches. Shared by `resolve` (a model
named on the command line) and `download` (the resumable, verified fetcher), which import it, not each other."""

from __future__ import annotations

# short name -> (hub repo, parameters, bytes of model.safetensors)
KNOWN_HUB_MODELS: dict[str, tuple[str, str, int]] = {
    "gpt2": ("openai-community/gpt2", "124M", 548_105_171),
    "gpt2-medium": ("openai-community/gpt2-medium", "355M", 1_519_919_320),
    "gpt2-large": ("openai-community/gpt2-large", "774M", 3_247_073_016),
    "gpt2-xl": ("openai-community/gpt2-xl", "1.5B", 6_431_829_964),
    "distilgpt2": ("distilbert/distilgpt2", "82M", 352_824_413),
}
HUB_FILES = ["config.json", "model.safetensors", "tokenizer.json", "vocab.json", "merges.txt",
             # Llama-family checkpoints: sharded weights, BOS/EOS settings
             "model.safetensors.index.json", "model-*-of-*.safetensors", "tokenizer_config.json",
             "generation_config.json"]
