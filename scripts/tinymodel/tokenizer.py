"""A word-level tokenizer for the synthetic language, with a Gemma-like chat template."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

logger = logging.getLogger(__name__)

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
START_TURN, END_TURN = "<start_of_turn>", "<end_of_turn>"
ROLE_USER, ROLE_MODEL = "user", "model"
SPECIALS = [PAD, EOS, BOS, UNK, START_TURN, END_TURN]
ROLES = [ROLE_USER, ROLE_MODEL]
PAD_ID, EOS_ID, BOS_ID, UNK_ID, START_TURN_ID, END_TURN_ID = range(6)
USER_ID, MODEL_ID = 6, 7
FIRST_WORD_ID = 8

# system turns are folded into user turns; assistant is called "model" as in Gemma
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{% if message['content'] is string %}{% set text = message['content'] %}"
    "{% else %}{% set text = message['content'] | map(attribute='text') | join(' ') %}{% endif %}"
    "<start_of_turn>{{ role }} {{ text | trim }} <end_of_turn> "
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model {% endif %}"
)


def vocabulary(words: list[str]) -> dict[str, int]:
    tokens = SPECIALS + ROLES + words
    return {token: index for index, token in enumerate(tokens)}


def save_tokenizer(words: list[str], folder: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary(words)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    core.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[START_TURN, END_TURN],
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(str(folder))
    # make sure the template sits in tokenizer_config.json itself
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.setdefault("chat_template", CHAT_TEMPLATE)
    # the name older transformers releases know (5.x reads it as its TokenizersBackend)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    template_file = folder / "chat_template.jinja"
    if template_file.exists():
        template_file.unlink()
    logger.info("tokenizer: %d tokens written to %s", len(vocab), folder)


def prompt_ids(words: list[int]) -> list[int]:
    """Token ids of a one-turn chat prompt (user text of word indices) ready for the model turn."""
    return [BOS_ID, START_TURN_ID, USER_ID, *words, END_TURN_ID, START_TURN_ID, MODEL_ID]


def text_of(words: list[int], names: list[str]) -> str:
    return " ".join(names[w - FIRST_WORD_ID] for w in words)
