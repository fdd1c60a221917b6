"""`oxygen generate`: greedy text from the backbone alone (no images), through the engine's
KV-pool code paths. `--json` prints {"token_ids": [...], "text": "..."} (new tokens only)."""
import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smol", help="model profile (smol, tiny, pi05-quarter, pi05, qwen3vl, ...)")
    p.add_argument("--checkpoint", help="weights: a pi0.5 checkpoint, another SmolLM2 GGUF file, or a "
                                        "Qwen3-VL checkpoint directory (qwen3vl: language only)")
    p.add_argument("--tokenizer", help="tokenizer file (pi0.5; a GGUF or cached JSON for smol; "
                                       "a Qwen3-VL profile reads its checkpoint's by default)")
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--max-new-tokens", type=int, default=64, help="upper bound on generated tokens")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt as one user message with the chat template "
                        "(generation prompt appended)")
    p.add_argument("--dtype", default="float32", help="float32 (fast on CPU), bfloat16 or float16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help='print {"token_ids": [...], "text": "..."}')


def run(args: argparse.Namespace) -> int:
    if args.max_new_tokens < 1:
        print("oxygen generate: --max-new-tokens must be >= 1", file=sys.stderr)
        return 2
    if not args.prompt:
        print("oxygen generate: --prompt must not be empty", file=sys.stderr)
        return 2

    from oxygen_ros.engine.generate import greedy_generate, prompt_ids
    from oxygen_ros.engine.registry import family, load_model
    from oxygen_ros.engine.text.tokenizer import decode

    try:
        model, tok = load_model(args.model, checkpoint=args.checkpoint, tokenizer_path=args.tokenizer,
                                dtype=args.dtype, device=args.device)
        ids = prompt_ids(tok, args.prompt, chat=args.chat)
    except (family("smollm2").GGUFError, ValueError, FileNotFoundError) as exc:
        print(f"oxygen generate: {exc}", file=sys.stderr)
        return 1
    new = greedy_generate(model, tok, ids, args.max_new_tokens)
    text = decode(tok, new)
    if args.json:
        print(json.dumps({"token_ids": new, "text": text}, ensure_ascii=False))
    else:
        print(text)
    return 0
