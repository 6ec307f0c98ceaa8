"""Build the bundled tiny Gemma 4 demo: corpus, tokenizer, target, MTP drafter, data.

Run through ``scripts/build_tiny_model.py``. Every random choice is drawn from
generators seeded by the build's settings, so a build is reproducible.
"""
