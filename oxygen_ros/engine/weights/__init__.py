"""What a profile loads: weights and, beside each loader, its tokenizer (SmolLM2 GGUF, π0.5 checkpoints)."""
