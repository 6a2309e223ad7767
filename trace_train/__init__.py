"""trace_train: GRPO-LoRA capability adapters and their composition (TRACE stages 3-4)."""
