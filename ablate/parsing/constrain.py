"""Decoding that writes only well-formed trees over the source words (decode.well_formed, a named option).

Vinyals et al. 2015 decode freely and repair what is malformed. A small model writes many malformed trees
(a bracket closed under the wrong label, a second root, a skipped word), and every repair costs F1.
`TreeStepper` wraps any `decode.Stepper`: before the search sees a row's next-token scores, it sets to
-inf every piece that cannot continue a well-formed linearized tree of the row's source, so the search
(greedy or beam, unchanged) ranks only trees that

1. open one root first, and end (EOS) right after the root closes;
2. close each bracket with its own label, after at least one child;
3. write one leaf per source word: XX (`tree`, `tree_sym`), or any word (`tree_words`: the reader places
   the source's words by position, so a leaf's text decides nothing; forcing the source's own words
   measured worse, as the model's copy of a rare word drifts and the forced word then drives it off);
4. open a bracket only while a word is left to go in it, and while the output can still end within its
   length cap (6.3: input + 300), counting the fewest pieces each remaining token can be spelled with.

The grammar reads whole tokens (`(NP`, `)NP`, a word); a token may be written in any of the vocabulary's
spellings of it ("▁(NP" or "▁" "(NP"), so the constraint needs no knowledge of how sentencepiece split
the training text. The log-softmax the search takes over the allowed pieces renormalizes among them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from ablate.data.tokenizer import EOS, PAD
from ablate.decode import Stepper, max_output_lengths

from .linearize import PTB_LABELS, XX, spell

SPACE = "\u2581"  # sentencepiece's word boundary, the first character of a word's first piece
UNK_TEXT = "\x00"  # the unknown piece's text inside a word: no treebank text holds it


class PieceTable:
    """The vocabulary's pieces as text, both ways, and the spellings of a token in pieces."""

    def __init__(self, pieces: list[str | None]):
        self.text = pieces  # id -> text; None for control ids (PAD, BOS, EOS), never part of a token
        self.id = {t: i for i, t in enumerate(pieces) if t is not None}
        self._starts: dict[str, tuple[int, ...]] = {}
        self._fewest: dict[str, int] = {}

    @classmethod
    def from_processor(cls, sp) -> PieceTable:
        def text(i: int) -> str | None:
            return None if sp.is_control(i) else UNK_TEXT if sp.is_unknown(i) else sp.id_to_piece(i)

        return cls([text(i) for i in range(sp.get_piece_size())])

    def starts(self, token: str) -> tuple[int, ...]:
        """Pieces that can begin `token` after a boundary: "▁" + token[:j], j = 0 .. len(token)."""
        if token not in self._starts:
            spelled = SPACE + token
            found = (self.id.get(spelled[:j]) for j in range(1, len(spelled) + 1))
            self._starts[token] = tuple(i for i in found if i is not None)
        return self._starts[token]

    def continuations(self, token: str, written: int) -> list[int]:
        """Pieces that continue "▁" + token after its first `written` characters."""
        spelled = SPACE + token
        found = (self.id.get(spelled[written:j]) for j in range(written + 1, len(spelled) + 1))
        return [i for i in found if i is not None]

    def fewest(self, token: str) -> int:
        """The fewest pieces that spell "▁" + token (a large number when none does)."""
        if token not in self._fewest:
            spelled = SPACE + token
            best = [0] + [len(spelled) + 1_000] * len(spelled)  # best[j]: fewest pieces for spelled[:j]
            for j in range(1, len(spelled) + 1):
                best[j] = min([best[i] + 1 for i in range(j) if spelled[i:j] in self.id] + [best[j]])
            self._fewest[token] = best[-1]
        return self._fewest[token]

    def count_words(self, ids: list[int]) -> int:
        """The words of a source row (ids, EOS and padding included): its pieces that begin one."""
        text = "".join(self.text[i] or "" for i in ids if i not in (PAD, EOS))
        return sum(1 for w in text.split(SPACE) if w)


@dataclass(frozen=True)
class Sentence:
    leaves: tuple[str, ...]  # the leaf tokens in order: one XX, or one ANY_WORD (tree_words), per word
    need: tuple[int, ...]  # need[i]: the fewest pieces that write leaves i..end
    cap: int  # output tokens allowed, EOS included (decode.max_output_lengths)


ANY_WORD = "\x01"  # a tree_words leaf: any word, as the reader trusts a leaf's position, not its text


@dataclass(frozen=True)
class TreeState:
    """One row's output so far, read as a tree prefix. Immutable: a beam step copies rows by reference."""

    stack: tuple[str, ...] = ()  # labels of the open constituents, the root first
    filled: bool = False  # the innermost open constituent has a child
    words: int = 0  # leaves written
    pieces: int = 0  # pieces written (EOS not included)
    partial: str = ""  # the text of the token being written, from its "▁"
    opens_ok: bool = True  # the token being written may be an opening bracket (room was left for it)
    closed: bool = False  # the root is closed: EOS is all that may follow
    dead: bool = False  # a piece no well-formed tree allows was fed: a row the search has already dropped


@dataclass
class Allowed:
    ids: list[int]  # pieces allowed by id
    word_start: bool = False  # and every piece that begins a word (tree_words)
    word_more: bool = False  # and every piece that continues one


class TreeGrammar:
    """The tokens a linearized tree allows after a prefix, in one target language, over one vocabulary."""

    def __init__(self, table: PieceTable, language: str, max_len_a: float, max_len_b: int):
        self.table, self.language, self.a, self.b = table, language, max_len_a, max_len_b
        self.any_word = language == "tree_words"
        self.opens = {spell("(" + label, language): label for label in PTB_LABELS}
        self.closes = {label: spell(")" + label, language) for label in PTB_LABELS}
        self.open_starts = sorted({i for tok in self.opens for i in table.starts(tok)})
        # the most pieces an opening bracket and its closing one take, at their shortest spelling
        self.open_cost = max(table.fewest(t) for t in self.opens)
        self.close_cost = max(table.fewest(t) for t in self.closes.values())
        self._brackets = {c for t in (*self.opens, *self.closes.values()) for c in t if language != "tree"}
        text = [t or "" for t in table.text]
        self.word_start = torch.tensor([t[:1] == SPACE and self._is_word(t[1:]) for t in text])
        self.word_more = torch.tensor([t[:1] != SPACE and self._is_word(t) for t in text])

    def _is_word(self, text: str) -> bool:
        return bool(text) and not any(c in self._brackets for c in text)

    def _spells(self, token: str, partial: str) -> bool:
        """Whether `partial` ("▁" and what follows) begins token `token`."""
        if token == ANY_WORD:
            return partial == SPACE or self._is_word(partial[1:])
        return (SPACE + token).startswith(partial)

    def sentence(self, src_row: list[int]) -> Sentence:
        leaf = ANY_WORD if self.any_word else spell(XX, self.language)
        leaves = (leaf,) * self.table.count_words(src_row)
        need = [0] * (len(leaves) + 1)
        for i in range(len(leaves) - 1, -1, -1):
            need[i] = need[i + 1] + (1 if leaves[i] == ANY_WORD else self.table.fewest(leaves[i]))
        src_len = sum(1 for i in src_row if i not in (PAD, EOS))
        cap = int(max_output_lengths(torch.tensor([src_len]), self.a, self.b)[0])
        return Sentence(leaves, tuple(need), cap)

    def _room(self, st: TreeState, s: Sentence) -> bool:
        """Whether a bracket opened now still leaves room to close every bracket, write every remaining
        word, and end within the cap."""
        finish = s.need[st.words] + (len(st.stack) + 1) * self.close_cost + 1  # + EOS
        return st.pieces + self.open_cost + finish <= s.cap

    def tokens(self, st: TreeState, s: Sentence, opens: bool) -> list[str]:
        """The whole tokens the tree allows next (rules 1 to 4 of the module's docstring)."""
        if st.closed or st.dead:
            return []
        out = []
        words_left = st.words < len(s.leaves)
        if words_left and st.stack:
            out.append(s.leaves[st.words])
        if words_left and opens:
            out.extend(self.opens)
        if st.stack and st.filled and (len(st.stack) > 1 or not words_left):
            out.append(self.closes[st.stack[-1]])
        return out

    def commit(self, st: TreeState, token: str) -> TreeState:
        """The state after the whole token `token`, which `tokens` allowed."""
        if token in self.opens:
            return dataclasses.replace(st, stack=st.stack + (self.opens[token],), filled=False, partial="")
        if st.stack and token == self.closes[st.stack[-1]]:
            root = len(st.stack) == 1
            return dataclasses.replace(st, stack=st.stack[:-1], filled=True, partial="", closed=root)
        return dataclasses.replace(st, words=st.words + 1, filled=True, partial="")

    def _finish_token(self, st: TreeState, s: Sentence) -> TreeState:
        """At a boundary: the token being written must be one the tree allows whole."""
        if not st.partial:
            return st
        token, allowed = st.partial[1:], self.tokens(st, s, st.opens_ok)
        if token in allowed or (ANY_WORD in allowed and self._is_word(token)):
            return self.commit(st, token)
        return dataclasses.replace(st, dead=True)

    def feed(self, st: TreeState, s: Sentence, piece: int) -> TreeState:
        """The state after the search chose `piece` for this row."""
        if st.dead:
            return st
        if piece == EOS:
            st = self._finish_token(st, s)
            return st if st.closed else dataclasses.replace(st, dead=True)
        text = self.table.text[piece]
        if text is None or st.closed:
            return dataclasses.replace(st, dead=True)
        if text.startswith(SPACE):
            st = self._finish_token(st, s)
            st = dataclasses.replace(st, partial=text, opens_ok=self._room(st, s))
        elif st.partial:
            st = dataclasses.replace(st, partial=st.partial + text)
        else:
            return dataclasses.replace(st, dead=True)
        allowed = any(self._spells(t, st.partial) for t in self.tokens(st, s, st.opens_ok))
        return dataclasses.replace(st, pieces=st.pieces + 1, dead=st.dead or not allowed)

    def allowed(self, st: TreeState, s: Sentence) -> Allowed:
        """The pieces this row may write next (never none: a dropped or finished row may write EOS)."""
        if st.dead or st.closed:
            return Allowed([EOS])
        out = Allowed([])
        if st.partial:
            written = len(st.partial)
            for t in self.tokens(st, s, st.opens_ok):
                if t == ANY_WORD:
                    out.word_more = self._spells(t, st.partial)
                elif self._spells(t, st.partial):
                    out.ids.extend(self.table.continuations(t, written))
            st = self._finish_token(st, s)  # the token may also end here
            if st.dead:
                return out if out.ids or out.word_more else Allowed([EOS])
        if st.closed:
            out.ids.append(EOS)
            return out
        opens = self._room(st, s)
        for t in self.tokens(st, s, opens=False):
            if t == ANY_WORD:
                out.word_start = True
                out.ids.extend(self.table.starts(""))  # a bare "▁"
            else:
                out.ids.extend(self.table.starts(t))
        if opens and st.words < len(s.leaves):
            out.ids.extend(self.open_starts)
        return out if out.ids or out.word_start or out.word_more else Allowed([EOS])


@dataclass
class Rows:
    inner: object  # the wrapped stepper's state
    trees: list[TreeState]  # per decoder row
    sentences: list[Sentence]  # per decoder row: its source's
    fed: bool = False  # the first step feeds BOS, which is no part of the tree


class TreeStepper:
    """A Stepper whose next-token scores are -inf wherever the row's tree cannot go (see the module)."""

    def __init__(self, inner: Stepper, grammar: TreeGrammar):
        self.inner, self.grammar = inner, grammar

    def start(self, src: Tensor, max_len: int, beams: int = 1) -> Rows:
        sentences = [self.grammar.sentence(row) for row in src.tolist()]
        per_row = [s for s in sentences for _ in range(beams)]
        return Rows(self.inner.start(src, max_len, beams), [TreeState()] * len(per_row), per_row)

    def step(self, tokens: Tensor, state: Rows) -> Tensor:
        logits = self.inner.step(tokens, state.inner)  # (R, V)
        g = self.grammar
        if state.fed:
            state.trees = [g.feed(t, s, p) for t, s, p in zip(state.trees, state.sentences, tokens.tolist())]
        state.fed = True
        allowed = [g.allowed(t, s) for t, s in zip(state.trees, state.sentences)]
        rows = [r for r, a in enumerate(allowed) for _ in a.ids]
        cols = [i for a in allowed for i in a.ids]
        allow = torch.zeros(logits.shape, dtype=torch.bool)
        allow[rows, cols] = True
        if g.any_word:
            allow |= torch.tensor([a.word_start for a in allowed])[:, None] & g.word_start
            allow |= torch.tensor([a.word_more for a in allowed])[:, None] & g.word_more
        return logits.masked_fill_(~allow.to(logits.device), float("-inf"))

    def reorder(self, state: Rows, index: Tensor, same_source: bool = False) -> Rows:
        keep = index.tolist()
        return Rows(
            self.inner.reorder(state.inner, index, same_source),
            [state.trees[i] for i in keep],
            [state.sentences[i] for i in keep],
            state.fed,
        )


_GRAMMARS: dict[tuple[str, str, float, int], TreeGrammar] = {}


def tree_stepper(inner: Stepper, cfg) -> TreeStepper:
    """`inner` constrained to the trees of run config `cfg` (its vocabulary, target language and output
    cap), the grammar built once a process from the run's prepared corpus."""
    from ablate.data.corpora import prepare_corpus

    key = (repr(cfg.data), cfg.data.tgt_lang, cfg.decode.max_len_a, cfg.decode.max_len_b)
    if key not in _GRAMMARS:
        import sentencepiece as spm

        model = prepare_corpus(cfg.data, log=lambda msg: None).spm_model
        table = PieceTable.from_processor(spm.SentencePieceProcessor(model_file=str(model)))
        _GRAMMARS[key] = TreeGrammar(table, *key[1:])
    return TreeStepper(inner, _GRAMMARS[key])
