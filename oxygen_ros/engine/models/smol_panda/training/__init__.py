"""Training smol-panda on the Panda scene's demonstrations (docs/training.md).

Stage 1 (LLaVA-style + auxiliary heads): the image encoder and projector learn, through the
frozen SmolLM2, to make it say where the cube is. Stage 2 (knowledge insulation): everything
but the action expert frozen; each training frame's prefix K/V computed once (kv_cache.py),
the expert trained on them by flow matching. Driven by scripts/train_panda.py.
"""
