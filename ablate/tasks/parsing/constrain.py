"""Decoding that writes only well-formed trees over the source words (task_cfg.well_formed, a named option).

Vinyals et al. 2015 decode freely and repair what is malformed. A small model writes many malformed trees
(a bracket closed under the wrong label, a second root, a missing word), and every repair costs F1.
`TreeStepper` wraps any `decode.Stepper`: before the search sees a row's next-token scores, it sets to
-inf every piece that cannot continue a well-formed linearized tree of the row's source, so the search
(greedy or beam, unchanged) ranks only trees that

1. open one root first, and end (EOS) right after the root closes;
2. close each bracket with its own label, after at least one child;
3. write one leaf per source word: XX (`tree`, `tree_sym`), or any word (`tree_words`: the reader places
   the source's words by position, so a leaf's text decides nothing; forcing the source's own words
   measured worse, as the model's copy of a rare word drifts and the forced word then drives it off);
4. open a bracket only while a word is left to go in it, and write no piece after which the output could
   no longer end within its length cap (6.3: input + 300).

The grammar reads whole tokens (`(NP`, `)NP`, `XX`, a word). A bracket or XX is written in the pieces
sentencepiece splits it into (what the model was trained on), so each costs a known number of pieces; a
`tree_words` leaf is any run of word pieces, budgeted at its source word's pieces and cut short by rule 4.
The log-softmax the search takes over the allowed pieces renormalizes among them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ablate.data.tokenizer import EOS, PAD
from ablate.data.treebank.linearize import PTB_LABELS, XX, spell
from ablate.nn.decode import Stepper, max_output_lengths

SPACE = "\u2581"  # sentencepiece's word boundary, the first character of a word's first piece
ANY_WORD = "\x01"  # a tree_words leaf: any word, as the reader trusts a leaf's position, not its text


class PieceTable:
    """The vocabulary's pieces as text, both ways, and each token's spelling in pieces."""

    def __init__(self, pieces: list[str | None], segment: Callable[[str], list[str]]):
        self.text = pieces  # id -> text; None for control ids (PAD, BOS, EOS) and the unknown piece
        self.id = {t: i for i, t in enumerate(pieces) if t is not None}
        self.segment = segment  # a word -> its pieces' texts, "▁" first, as sentencepiece splits it
        self._spelling: dict[str, tuple[int, ...]] = {}
        self._next: dict[tuple[str, str], list[int]] = {}  # the search asks the same few pairs all along

    @classmethod
    def from_processor(cls, sp) -> PieceTable:
        def text(i: int) -> str | None:
            return None if sp.is_control(i) or sp.is_unknown(i) else sp.id_to_piece(i)

        pieces = [text(i) for i in range(sp.get_piece_size())]
        return cls(pieces, lambda word: sp.encode(word, out_type=str))

    def spelling(self, token: str) -> tuple[int, ...]:
        """The pieces of "▁" + token as sentencepiece splits it; () when a character is not a piece."""
        if token not in self._spelling:
            ids = [self.id.get(t) for t in self.segment(token)]
            self._spelling[token] = () if None in ids else tuple(ids)
        return self._spelling[token]

    def next_piece(self, token: str, written: str) -> list[int]:
        """The piece of `token`'s spelling that follows the text `written` ([] if `written` is no prefix
        of the spelling at a piece boundary)."""
        key = (token, written)
        if key not in self._next:
            done, self._next[key] = "", []
            for i in self.spelling(token):
                if done == written:
                    self._next[key] = [i]
                    break
                done += self.text[i]
        return self._next[key]

    def word_pieces(self, ids: list[int]) -> list[int]:
        """The number of pieces of each word of a source row (ids, EOS and padding included)."""
        out: list[int] = []
        for i in ids:
            if i in (PAD, EOS):
                continue
            if (self.text[i] or "").startswith(SPACE) or not out:
                out.append(0)
            out[-1] += 1
        return out


@dataclass(frozen=True)
class Sentence:
    words: int  # the source's words: the tree's leaves
    need: tuple[int, ...]  # need[i]: the pieces that leaves i..end take (a word: its source's pieces)
    cap: int  # output tokens allowed, EOS included (decode.max_output_lengths)


class TreeState(NamedTuple):
    """One row's output so far, read as a tree prefix. Immutable: a beam step copies rows by reference (a
    tuple: a section's search makes about a million of them, and `_replace` is cheap)."""

    stack: tuple[str, ...] = ()  # labels of the open constituents, the root first
    filled: bool = False  # the innermost open constituent has a child
    words: int = 0  # leaves written whole
    pieces: int = 0  # pieces written (EOS not included)
    partial: str = ""  # the text of the token being written, from its "▁"
    open_budget: int = 0  # the pieces an opening bracket begun with `partial` may take, its close included
    close_debt: int = 0  # the pieces that closing the open constituents takes
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
        self.table, self.a, self.b = table, max_len_a, max_len_b
        self.any_word = language == "tree_words"
        self.leaf = ANY_WORD if self.any_word else spell(XX, language)  # every leaf's token
        # the labels whose brackets the vocabulary spells (a label absent from the training text may not be)
        labels = [x for x in PTB_LABELS if all(table.spelling(spell(b + x, language)) for b in "()")]
        self.opens = {spell("(" + label, language): label for label in labels}
        self.closes = {label: spell(")" + label, language) for label in labels}
        self.close_cost = {label: len(table.spelling(t)) for label, t in self.closes.items()}
        # the pieces each opening bracket takes with its close, and its first piece
        self.open_cost = {t: len(table.spelling(t)) + self.close_cost[x] for t, x in self.opens.items()}
        self.open_starts = sorted((c, table.spelling(t)[0]) for t, c in self.open_cost.items())
        self._start_costs = [c for c, _ in self.open_starts]
        # the opening brackets by cost: those within a budget are a prefix (bisect), not a scan of them all
        self._by_cost = sorted(self.open_cost.items(), key=lambda tc: tc[1])
        self._costs = [c for _, c in self._by_cost]
        self._brackets = {c for t in (*self.opens, *self.closes.values()) for c in t}
        text = [t or "" for t in table.text]
        self.word_start = torch.tensor([t[:1] == SPACE and self._is_word(t[1:]) for t in text])
        self.word_more = torch.tensor([t[:1] != SPACE and self._is_word(t) for t in text])
        self.bare_space = [table.id[SPACE]] if SPACE in table.id else []

    def _is_word(self, text: str) -> bool:
        return bool(text) and not any(c in self._brackets for c in text)

    def _begins(self, token: str, partial: str) -> bool:
        """Whether `partial` ("▁" and what follows) begins token `token`."""
        if token == ANY_WORD:
            return partial == SPACE or self._is_word(partial[1:])
        return (SPACE + token).startswith(partial)

    def sentence(self, src_row: list[int]) -> Sentence:
        lengths = self.table.word_pieces(src_row)
        costs = lengths if self.any_word else [len(self.table.spelling(self.leaf))] * len(lengths)
        need = [0] * (len(costs) + 1)
        for i in range(len(costs) - 1, -1, -1):
            need[i] = need[i + 1] + costs[i]
        cap = int(max_output_lengths(torch.tensor([sum(lengths)]), self.a, self.b)[0])
        return Sentence(len(lengths), tuple(need), cap)

    def _finish(self, st: TreeState, s: Sentence, words: int) -> int:
        """The pieces that finishing the tree takes after `words` leaves: the words left, a close for each
        open bracket, EOS."""
        return s.need[words] + st.close_debt + 1

    def _open_budget(self, st: TreeState, s: Sentence) -> int:
        """The pieces a bracket opened at this boundary may take with its close, for the tree to end
        within the cap; -1 when no word is left to go in it."""
        return s.cap - st.pieces - self._finish(st, s, st.words) if st.words < s.words else -1

    def tokens(self, st: TreeState, s: Sentence, open_budget: int) -> list[str]:
        """The whole tokens the tree allows next, the opening brackets that take at most `open_budget`
        pieces with their close among them (rules 1 to 4 of the module's docstring)."""
        if st.closed or st.dead:
            return []
        out = []
        words_left = st.words < s.words
        if words_left and st.stack:
            out.append(self.leaf)
        if words_left:
            out.extend(self.opens_within(open_budget))
        if st.stack and st.filled and (len(st.stack) > 1 or not words_left):
            out.append(self.closes[st.stack[-1]])
        return out

    def opens_within(self, budget: int) -> list[str]:
        """The opening brackets that take at most `budget` pieces with their close."""
        return [t for t, _ in self._by_cost[: bisect.bisect_right(self._costs, budget)]]

    def commit(self, st: TreeState, token: str) -> TreeState:
        """The state after the whole token `token`, which `tokens` allowed."""
        if token in self.opens:
            label = self.opens[token]
            debt = st.close_debt + self.close_cost[label]
            return st._replace(stack=st.stack + (label,), filled=False, partial="", close_debt=debt)
        if st.stack and token == self.closes[st.stack[-1]]:
            root, debt = len(st.stack) == 1, st.close_debt - self.close_cost[st.stack[-1]]
            return st._replace(stack=st.stack[:-1], filled=True, partial="", closed=root, close_debt=debt)
        return st._replace(words=st.words + 1, filled=True, partial="")

    def _finish_token(self, st: TreeState, s: Sentence) -> TreeState:
        """At a boundary: the token being written must be one the tree allows whole."""
        if not st.partial:
            return st
        token, allowed = st.partial[1:], self.tokens(st, s, st.open_budget)
        if token in allowed or (ANY_WORD in allowed and self._is_word(token)):
            return self.commit(st, token)
        return st._replace(dead=True)

    def feed(self, st: TreeState, s: Sentence, piece: int) -> TreeState:
        """The state after the search chose `piece` for this row."""
        if st.dead:
            return st
        if piece == EOS:
            st = self._finish_token(st, s)
            return st if st.closed else st._replace(dead=True)
        text = self.table.text[piece]
        if text is None or st.closed:
            return st._replace(dead=True)
        if text.startswith(SPACE):
            st = self._finish_token(st, s)
            st = st._replace(partial=text, open_budget=self._open_budget(st, s))
        elif st.partial:
            st = st._replace(partial=st.partial + text)
        else:
            return st._replace(dead=True)
        allowed = any(self._begins(t, st.partial) for t in self.tokens(st, s, st.open_budget))
        return st._replace(pieces=st.pieces + 1, dead=st.dead or not allowed)

    def allowed(self, st: TreeState, s: Sentence) -> Allowed:
        """The pieces this row may write next (never none: a dropped or finished row may write EOS)."""
        if st.dead or st.closed:
            return Allowed([EOS])
        out = Allowed([])
        if st.partial:
            for t in self.tokens(st, s, st.open_budget):
                if t != ANY_WORD:
                    out.ids.extend(self.table.next_piece(t, st.partial))
                elif self._begins(t, st.partial):  # a longer word, if the rest still fits (rule 4)
                    out.word_more = st.pieces + 1 + self._finish(st, s, st.words + 1) <= s.cap
            st = self._finish_token(st, s)  # the token may also end here
            if st.dead:
                return out if out.ids or out.word_more else Allowed([EOS])
        if st.closed:
            out.ids.append(EOS)
            return out
        for t in self.tokens(st, s, open_budget=-1):
            if t == ANY_WORD:
                out.word_start = True
                if st.pieces + 2 + self._finish(st, s, st.words + 1) <= s.cap:  # "▁", then the word
                    out.ids.extend(self.bare_space)
            else:
                out.ids.append(self.table.spelling(t)[0])
        budget = self._open_budget(st, s)
        out.ids.extend(
            first for _, first in self.open_starts[: bisect.bisect_right(self._start_costs, budget)]
        )
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

    key = (repr((cfg.data, cfg.task_cfg)), cfg.data.tgt_lang, cfg.decode.max_len_a, cfg.decode.max_len_b)
    if key not in _GRAMMARS:
        import sentencepiece as spm

        model = prepare_corpus(cfg, log=lambda msg: None).spm_model
        table = PieceTable.from_processor(spm.SentencePieceProcessor(model_file=str(model)))
        _GRAMMARS[key] = TreeGrammar(table, *key[1:])
    return TreeStepper(inner, _GRAMMARS[key])
