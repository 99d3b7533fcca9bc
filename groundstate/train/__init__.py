"""Training: models and tokenizers groundstate builds itself, chat formats, GRPO engines."""
