"""Text in the engine, ROS-free: the tokenizer protocol, the byte tokenizers and UTF-8-safe
streaming; GPT-2's byte alphabet and Hugging Face chat templates (the SmolLM2 and Qwen3-VL
tokenizers share them); the language streams' default prompts; a robot's memory log and
the answer prompt that carries it. Imports nothing else of the package."""
