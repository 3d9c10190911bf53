"""Counting a prompt's tokens before it is sent, with the model's own tokenizer where one is at
hand: the GGUF file's for the local backend, tiktoken's for OpenAI models (when tiktoken is
installed and has its encoding; it is not a dependency of biasim), else a stated approximation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: The approximation's characters per token (English text on a BPE tokenizer).
CHARS_PER_TOKEN = 4.0
#: Tokens a chat message adds around its content (role and separators; OpenAI's count is 3-4).
MESSAGE_OVERHEAD = 4


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of text as one model does.

    Attributes:
        count: Text -> tokens.
        method: How, in words, for the estimate's notes.
        pieces: Text -> its tokens' texts (``None`` for the approximation).
    """

    count: Callable[[str], int]
    method: str
    pieces: Callable[[str], list[str]] | None = None


def approximate(why: str = "") -> TokenCounter:
    """Characters / :data:`CHARS_PER_TOKEN`, rounded up."""
    return TokenCounter(
        lambda text: math.ceil(len(text) / CHARS_PER_TOKEN),
        f"approximation: {CHARS_PER_TOKEN:g} characters a token" + (f" ({why})" if why else ""),
    )


def gguf_counter(path: Path) -> TokenCounter:
    """The tokenizer inside a GGUF model file (its vocabulary only is read)."""
    try:
        from llama_cpp import Llama

        vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
    except Exception as exc:  # a model file llama.cpp cannot read: say so, still estimate
        return approximate(f"{path.name} could not be read: {exc}")

    def ids(text: str) -> list[int]:
        return vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    return TokenCounter(
        lambda text: len(ids(text)),
        f"the tokenizer of {path.name}",
        lambda text: [vocab.detokenize([t]).decode("utf-8", errors="ignore") for t in ids(text)],
    )


def tiktoken_counter(model: str) -> TokenCounter:
    """tiktoken's encoding of an OpenAI model, when tiktoken is installed and has it."""
    try:
        import tiktoken
    except ImportError:
        return approximate("tiktoken is not installed")
    try:
        with _no_download():
            try:
                encoding = tiktoken.encoding_for_model(model)
            except KeyError:
                encoding = tiktoken.get_encoding("o200k_base")
    except Exception:
        return approximate("tiktoken's encoding is not in its cache (TIKTOKEN_CACHE_DIR)")
    return TokenCounter(
        lambda text: len(encoding.encode(text, disallowed_special=())),
        f"tiktoken {encoding.name}",
        lambda text: [encoding.decode([t]) for t in encoding.encode(text, disallowed_special=())],
    )


@contextmanager
def _no_download() -> Iterator[None]:
    """tiktoken downloads an encoding on first use; an estimate sends no request, so only an
    encoding already in tiktoken's cache is used."""
    import tiktoken.load

    fetch = tiktoken.load.read_file

    def local_only(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise OSError(f"not downloading {blobpath}")
        return fetch(blobpath)

    tiktoken.load.read_file = local_only
    try:
        yield
    finally:
        tiktoken.load.read_file = fetch


def chat_tokens(counter: TokenCounter, messages: list[str]) -> int:
    """Prompt tokens of chat messages with these contents."""
    return sum(counter.count(m) + MESSAGE_OVERHEAD for m in messages) + 3
