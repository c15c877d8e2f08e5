"""Hidden states at chosen token positions, batched, and forward-hook interventions (torch).

Layer ``ℓ`` of an ``L``-layer decoder is the residual stream after block ``ℓ`` (``ℓ = 0``: the token
embeddings; ``ℓ = L``: the last block's output *before* the final norm; Hugging Face's
``output_hidden_states`` gives the same tensors for ``ℓ < L`` and the normed one at ``L``). States are read by
forward hooks on the embedding and on every block; an intervention is a forward hook, registered first, that
adds a given vector to the output of the module of layer ``ℓ`` at one position per sequence, so every later
hook and block sees the edited stream.

Positions: :func:`last_subject_token` is the last token whose character span starts before the subject's end
(the tokenizer's offsets; special tokens, whose spans are empty, are never chosen), as in the relations code.
Sequences are right-padded, so positions and the last real token are those of the unpadded sequence."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager

import numpy as np

from georecall.errors import InputError

__all__ = ["Batch", "Streams", "continuation_match", "decoder_parts", "encode", "first_token_ids", "hooks",
           "last_subject_token", "lens", "run", "subset"]


def decoder_parts(model):
    """``(embedding module, list of blocks)`` of a decoder-only Hugging Face model (Llama-style layout).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM whose decoder (``get_decoder()``, else ``.model``) has a ``layers`` list.

    Returns
    -------
    (torch.nn.Module, list of torch.nn.Module)
        The input embedding (layer 0) and the blocks (layers 1..L).

    Raises
    ------
    InputError
        The decoder has no ``layers``.
    """
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layers = getattr(base, "layers", None)
    if layers is None:
        raise InputError(f"model {type(model).__name__}: no decoder blocks found "
                         f"(a Llama-style model is needed)")
    return base.get_input_embeddings(), list(layers)


def last_subject_token(offsets: Sequence[tuple[int, int]], end: int) -> int:
    """Index of the last token whose span starts before character ``end`` (the subject's end).

    Parameters
    ----------
    offsets : sequence of (start, end)
        The tokenizer's character offsets of one sequence (special tokens have start == end).
    end : int
        The subject's end in characters.

    Returns
    -------
    int

    Raises
    ------
    InputError
        No token covers the subject.
    """
    best = -1
    for j, (a, b) in enumerate(offsets):
        if b > a and a < end:
            best = j
    if best < 0:
        raise InputError(f"no token covers characters before {end}")
    return best


class Batch:
    """Encoded sequences: ids (right-padded), mask, one chosen position each, and the last real token.

    Parameters
    ----------
    input_ids : (n, T) long tensor
        Token ids, right-padded.
    attention_mask : (n, T) tensor
        1 on real tokens, 0 on padding.
    positions : (n,) array of int
        The position whose state is read in each sequence (stored as a long tensor).

    The last real token of each sequence, ``last``, is ``attention_mask.sum(dim=1) − 1``.
    """

    def __init__(self, input_ids, attention_mask, positions):
        import torch
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.positions = torch.as_tensor(np.asarray(positions), dtype=torch.long)
        self.last = attention_mask.sum(dim=1) - 1


def encode(tokenizer, texts: Sequence[str], spans: Sequence[tuple[int, int]] | None = None) -> Batch:
    """Tokenize ``texts`` (right padding); the chosen position is the last token of each span, else the last.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerFast
        A fast tokenizer (offsets are needed when ``spans`` is given); its padding side is set to right and,
        when it has none, its pad token to the end-of-sequence token.
    texts : sequence of str
        The sequences.
    spans : sequence of (start, end), optional
        The subject's characters in each text.

    Returns
    -------
    Batch
        Ids, mask, the chosen position of each sequence and its last real token.

    Raises
    ------
    InputError
        A span that no token covers (:func:`last_subject_token`).
    """
    tokenizer.padding_side = "right"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(list(texts), return_offsets_mapping=spans is not None, padding=True, return_tensors="pt")
    mask = enc["attention_mask"]
    if spans is None:
        positions = (mask.sum(dim=1) - 1).numpy()
    else:
        offsets = enc["offset_mapping"].tolist()
        positions = np.array([last_subject_token(offsets[i][: int(mask[i].sum())], spans[i][1])
                              for i in range(len(texts))])
    return Batch(enc["input_ids"], mask, positions)


def first_token_ids(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """The first token id of each text (no special tokens).

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizer
        The model's tokenizer.
    texts : sequence of str
        The texts (attributes, with their leading space).

    Returns
    -------
    ndarray of int64 (len(texts),)

    Raises
    ------
    InputError
        A text that tokenizes to no token.
    """
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    if any(len(x) == 0 for x in ids):
        raise InputError("an attribute tokenizes to nothing")
    return np.array([x[0] for x in ids], dtype=np.int64)


@contextmanager
def hooks(model, layers: Sequence[int], store: dict, positions, edits: dict | None = None,
          edit_positions=None):
    """Read and edit the residual stream at one position per sequence, for the ``with`` block's forward
    passes.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A decoder-only model (:func:`decoder_parts`).
    layers : sequence of int
        Layers whose state at ``positions`` is stored in ``store[layer]`` (a tensor, one row per sequence).
    store : dict
        Filled by the forward pass.
    positions : (n,) long tensor
        One position per sequence of the batch.
    edits : dict, optional
        ``{layer: (n, width) tensor}`` added to the output of layer ``layer`` at ``positions`` before anything
        else (Hugging Face's own output capture included) sees it.
    edit_positions : (n,) long tensor, optional
        Where the edits are added (default ``positions``).

    Raises
    ------
    InputError
        A model without decoder blocks (:func:`decoder_parts`).
    """
    emb, blocks = decoder_parts(model)
    modules = [emb] + blocks
    handles = []

    def output_of(out):
        return out[0] if isinstance(out, tuple) else out

    def replace(out, new):
        return (new,) + tuple(out[1:]) if isinstance(out, tuple) else new

    def edit_hook(delta):
        def hook(module, args, out):
            h = output_of(out).clone()
            h[rows, where] = h[rows, where] + delta.to(h.dtype)
            return replace(out, h)
        return hook

    def read_hook(layer):
        def hook(module, args, out):
            store[layer] = output_of(out)[rows, positions].detach()
        return hook

    import torch
    rows = torch.arange(len(positions))
    where = positions if edit_positions is None else edit_positions
    try:
        for layer, delta in (edits or {}).items():
            handles.append(modules[layer].register_forward_hook(edit_hook(delta), prepend=True))
        for layer in layers:
            handles.append(modules[layer].register_forward_hook(read_hook(layer)))
        yield
    finally:
        for h in handles:
            h.remove()


# Decoders whose forward, given ``inputs_embeds``, runs exactly its blocks and final norm on them (no scaling
# of the embeddings, positions from 0): for these an edited pass may start at the edited layer (Streams).
RESUMABLE = ("llama",)


@contextmanager
def _blocks(model, start: int, stop: int):
    """Run only blocks ``start..stop−1`` (0-based) of the decoder in the ``with`` body: the decoder's
    ``layers`` list is replaced by that slice and restored after."""
    import torch
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    kept = base.layers
    base.layers = torch.nn.ModuleList(list(kept)[start:stop])
    try:
        yield base
    finally:
        base.layers = kept


class Streams:
    """The unedited residual stream of a batch's sequences (every position) at chosen layers, so that an
    edited pass (:func:`run` with ``streams``) starts at the edited layer instead of recomputing the layers
    below it, which the edit does not touch.

    Computed lazily per chunk of :func:`run`'s chunking (``batch_size`` sequences, trimmed to the chunk's
    longest), once for the chunk's distinct sequences, with the same padded length as the edited pass: a
    sequence's states depend on the padded length, not on the other sequences of the chunk, so the resumed
    pass gives the same tensors as the full one (tests/test_lm.py checks it bitwise).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A decoder-only model whose type is in :data:`RESUMABLE` (else :func:`run` runs every layer).
    batch : Batch
        The sequences (as :func:`run` receives them).
    layers : sequence of int
        The layers at which edits will be made.
    batch_size : int
        :func:`run`'s chunk size.
    """

    def __init__(self, model, batch: Batch, layers: Sequence[int], batch_size: int = 64):
        self.model, self.batch, self.batch_size = model, batch, batch_size
        self.layers = sorted(set(int(x) for x in layers))
        self.usable = getattr(model.config, "model_type", None) in RESUMABLE
        self._chunks: dict[int, tuple] = {}

    def at(self, lo: int, layer: int):
        """The chunk starting at ``lo``: the unedited stream after layer ``layer``, (chunk, T, width).

        Parameters
        ----------
        lo : int
            The chunk's first sequence (as :func:`run`'s chunking starts it).
        layer : int
            One of the ``layers`` given.

        Returns
        -------
        torch.Tensor
            ``(chunk, T, width)``, T the chunk's longest sequence.
        """
        import torch
        if lo not in self._chunks:
            hi = min(self.batch.input_ids.shape[0], lo + self.batch_size)
            mask = self.batch.attention_mask[lo:hi]
            keep = int(mask.sum(dim=1).max())
            ids = self.batch.input_ids[lo:hi, :keep]
            distinct, inverse = torch.unique(torch.cat([ids, mask[:, :keep]], dim=1), dim=0,
                                             return_inverse=True)
            store: dict = {}
            emb, blocks = decoder_parts(self.model)
            modules = [emb] + blocks
            handles = [modules[x].register_forward_hook(
                lambda _m, _a, out, x=x: store.__setitem__(x, out[0] if isinstance(out, tuple) else out))
                for x in self.layers]
            try:
                with torch.inference_mode(), _blocks(self.model, 0, max(self.layers)) as base:
                    base(input_ids=distinct[:, :keep], attention_mask=distinct[:, keep:], use_cache=False)
            finally:
                for h in handles:
                    h.remove()
            self._chunks[lo] = (store, inverse)
        store, inverse = self._chunks[lo]
        return store[layer][inverse]


def run(model, batch: Batch, layers: Sequence[int], *, edits: dict | None = None, batch_size: int = 64,
        progress: Callable[[int], None] | None = None, edit_positions=None,
        streams: Streams | None = None) -> tuple[np.ndarray, np.ndarray]:
    """States at each sequence's chosen position for ``layers``, and the logits' argmax at its last token.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM in eval mode (run without gradients).
    batch : Batch
        The encoded sequences (:func:`encode`).
    layers : sequence of int
        Layer indices in ``0..L``.
    edits : dict, optional
        ``{layer: delta}``, ``delta`` an (n, width) array added at layer ``layer`` at each chosen position.
    batch_size : int
        Sequences per forward pass.
    progress : callable, optional
        Called with the number of sequences done.
    edit_positions : (n,) array of int, optional
        Where the edits are added (default the chosen positions, where the states are read).
    streams : Streams, optional
        The unedited streams of ``batch`` (same ``batch_size``): with one edited layer among its layers and
        every read layer above it, each pass starts at the edited layer (the same result).

    Returns
    -------
    states : (n, len(layers), width) float32 array
    answers : (n,) int64 array
        The greedy next token after each sequence.

    Raises
    ------
    InputError
        A model without decoder blocks (:func:`decoder_parts`).
    """
    import torch
    n = batch.input_ids.shape[0]
    width = model.config.hidden_size
    states = np.zeros((n, len(layers), width), dtype=np.float32)
    answers = np.zeros(n, dtype=np.int64)
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    head = model.get_output_embeddings()
    tensor_edits = {k: torch.as_tensor(np.asarray(v, dtype=np.float32)) for k, v in (edits or {}).items()}
    where = None if edit_positions is None else torch.as_tensor(np.asarray(edit_positions), dtype=torch.long)
    start = None  # the edited layer, where a resumed pass starts
    if (streams is not None and streams.usable and streams.batch_size == batch_size
            and len(tensor_edits) == 1 and next(iter(tensor_edits)) in streams.layers
            and all(x > next(iter(tensor_edits)) for x in layers)):
        start = next(iter(tensor_edits))
    with torch.inference_mode():
        for lo in range(0, n, batch_size):
            hi = min(n, lo + batch_size)
            mask = batch.attention_mask[lo:hi]
            keep = int(mask.sum(dim=1).max())  # right padding: trailing pad columns dropped
            store: dict = {}
            sub = {k: v[lo:hi] for k, v in tensor_edits.items()}
            pos = batch.positions[lo:hi] if where is None else where[lo:hi]
            if start is not None and streams is not None:
                h = streams.at(lo, start).clone()
                rows = torch.arange(hi - lo)
                h[rows, pos] = h[rows, pos] + sub[start].to(h.dtype)
                with hooks(model, layers, store, batch.positions[lo:hi]), \
                        _blocks(model, start, len(decoder_parts(model)[1])) as part:
                    final = part(inputs_embeds=h, attention_mask=mask[:, :keep], use_cache=False)
            else:
                with hooks(model, layers, store, batch.positions[lo:hi], sub,
                           None if where is None else where[lo:hi]):
                    final = base(input_ids=batch.input_ids[lo:hi, :keep], attention_mask=mask[:, :keep],
                                 use_cache=False)
            for j, layer in enumerate(layers):
                states[lo:hi, j] = store[layer].float().numpy()
            # the read-out at the last real token only (the model's own head, after the final norm)
            last = final.last_hidden_state[torch.arange(hi - lo), batch.last[lo:hi]]
            answers[lo:hi] = head(last).argmax(dim=-1).numpy()
            if progress is not None:
                progress(hi)
    return states, answers


def subset(batch: Batch, rows, positions=None) -> Batch:
    """The sequences ``rows`` of ``batch`` (repeats allowed), reading at ``positions`` (default their own).

    Parameters
    ----------
    batch : Batch
        Encoded sequences.
    rows : sequence of int
        Which sequences, in order.
    positions : sequence of int, optional
        The chosen position of each selected sequence.

    Returns
    -------
    Batch
    """
    sel = np.asarray(rows, dtype=np.int64)
    pos = batch.positions.numpy()[sel] if positions is None else np.asarray(positions)
    return Batch(batch.input_ids[sel], batch.attention_mask[sel], pos)


def lens(model, states: np.ndarray, *, batch_size: int = 256) -> np.ndarray:
    """The logit lens: the model's own final norm and head applied to residual states; the argmax token.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A Llama-style causal LM (``model.model.norm``, the output embeddings).
    states : (..., width) array
        Residual-stream states (any layer).

    Returns
    -------
    ndarray of int64, shape ``states.shape[:-1]``
    """
    import torch
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    head = model.get_output_embeddings()
    flat = np.asarray(states, dtype=np.float32).reshape(-1, states.shape[-1])
    out = np.zeros(flat.shape[0], dtype=np.int64)
    with torch.inference_mode():
        for lo in range(0, flat.shape[0], batch_size):
            x = torch.as_tensor(flat[lo : lo + batch_size])
            out[lo : lo + batch_size] = head(base.norm(x)).argmax(dim=-1).numpy()
    return out.reshape(states.shape[:-1])


def lens_within(model, states: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Like :func:`lens`, the argmax restricted to the token ids ``candidates`` (returned as token ids)."""
    import torch
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    W = model.get_output_embeddings().weight[torch.as_tensor(np.asarray(candidates, dtype=np.int64))]
    flat = np.asarray(states, dtype=np.float32).reshape(-1, states.shape[-1])
    with torch.inference_mode():
        k = (base.norm(torch.as_tensor(flat)) @ W.T).argmax(dim=-1).numpy()
    return np.asarray(candidates)[k].reshape(states.shape[:-1])


def continuation_match(model, tokenizer, prompts: Sequence[str], continuations: Sequence[str], *,
                       batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Whether greedy decoding after each prompt produces exactly the continuation's tokens.

    Greedy decoding yields the continuation ``c_1..c_m`` exactly when, with the continuation fed in (teacher
    forcing), the argmax at the prompt's last token is ``c_1`` and at each ``c_k`` is ``c_{k+1}``: one
    forward pass per sequence. The continuation's tokens are those of ``prompt + continuation`` after the
    prompt's own tokens (the prompt must tokenize to a prefix of the whole; else the fact counts as not
    matched).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM in eval mode.
    tokenizer : transformers.PreTrainedTokenizerFast
        Its tokenizer.
    prompts, continuations : sequences of str
        Pairs (the continuation with its leading space).
    batch_size : int
        Sequences per forward pass.

    Returns
    -------
    matched : (n,) bool array
    lengths : (n,) int array
        The continuation's number of tokens.
    """
    import torch
    P = tokenizer(list(prompts))["input_ids"]
    F = tokenizer([a + b for a, b in zip(prompts, continuations)])["input_ids"]
    n = len(P)
    matched = np.zeros(n, dtype=bool)
    lengths = np.array([len(f) - len(p) for p, f in zip(P, F)])
    ok = np.array([f[: len(p)] == p and len(f) > len(p) for p, f in zip(P, F)])
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    head = model.get_output_embeddings()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    # the sequences in order of length, so that a batch pads little (teacher forcing: a sequence's logits do
    # not depend on the others in its batch; its padded length moves them by float rounding only)
    order = [int(i) for i in np.argsort([len(f) for f in F], kind="stable") if ok[i]]
    with torch.inference_mode():
        for lo in range(0, len(order), batch_size):
            idx = order[lo : lo + batch_size]
            T = max(len(F[i]) for i in idx)
            ids = torch.full((len(idx), T), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), T), dtype=torch.long)
            for k, i in enumerate(idx):
                ids[k, : len(F[i])] = torch.as_tensor(F[i])
                mask[k, : len(F[i])] = 1
            hidden = base(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            # the head once per batch, on every sequence's continuation rows together (one product with the
            # unembedding instead of one per sequence: the unembedding is most of a small model's weights)
            spans = [(len(P[i]) - 1, len(F[i]) - 1) for i in idx]
            pred = head(torch.cat([hidden[k, a:b] for k, (a, b) in enumerate(spans)])).argmax(dim=-1).numpy()
            at = 0
            for (a, b), i in zip(spans, idx):
                matched[i] = bool(np.array_equal(pred[at : at + b - a], np.asarray(F[i][a + 1 : b + 1])))
                at += b - a
    return matched, lengths
