"""The built-in parallel corpus: English -> German-like sentences generated from a small grammar.

Deterministic for a given seed, so every machine trains on the same text. It is made to exercise what the
Table 3 ablations change:
- agreement: German articles and adjective endings depend on the noun's gender, number and case; the verb
  agrees with the subject's number;
- word reordering: verb-second after a fronted adverb, verb-final in subordinate clauses, the participle of
  the perfect at the end of the clause (a long-range dependency across objects and prepositional phrases);
- relative clauses whose pronoun agrees with a noun several tokens back;
- lengths from 4 to about 50 tokens through coordination and subordination.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# noun: english singular, english plural, german singular, german plural, gender (m/f/n)
NOUNS = [
    ("dog", "dogs", "Hund", "Hunde", "m"),
    ("cat", "cats", "Katze", "Katzen", "f"),
    ("child", "children", "Kind", "Kinder", "n"),
    ("man", "men", "Mann", "Männer", "m"),
    ("woman", "women", "Frau", "Frauen", "f"),
    ("house", "houses", "Haus", "Häuser", "n"),
    ("ball", "balls", "Ball", "Bälle", "m"),
    ("car", "cars", "Auto", "Autos", "n"),
    ("book", "books", "Buch", "Bücher", "n"),
    ("table", "tables", "Tisch", "Tische", "m"),
    ("bird", "birds", "Vogel", "Vögel", "m"),
    ("flower", "flowers", "Blume", "Blumen", "f"),
    ("teacher", "teachers", "Lehrer", "Lehrer", "m"),
    ("pupil", "pupils", "Schüler", "Schüler", "m"),
    ("girl", "girls", "Mädchen", "Mädchen", "n"),
    ("boy", "boys", "Junge", "Jungen", "m"),
    ("city", "cities", "Stadt", "Städte", "f"),
    ("tree", "trees", "Baum", "Bäume", "m"),
    ("letter", "letters", "Brief", "Briefe", "m"),
    ("door", "doors", "Tür", "Türen", "f"),
    ("window", "windows", "Fenster", "Fenster", "n"),
    ("apple", "apples", "Apfel", "Äpfel", "m"),
    ("horse", "horses", "Pferd", "Pferde", "n"),
    ("river", "rivers", "Fluss", "Flüsse", "m"),
    ("street", "streets", "Straße", "Straßen", "f"),
    ("picture", "pictures", "Bild", "Bilder", "n"),
    ("doctor", "doctors", "Arzt", "Ärzte", "m"),
    ("friend", "friends", "Freund", "Freunde", "m"),
    ("lamp", "lamps", "Lampe", "Lampen", "f"),
    ("glass", "glasses", "Glas", "Gläser", "n"),
    ("chair", "chairs", "Stuhl", "Stühle", "m"),
    ("song", "songs", "Lied", "Lieder", "n"),
    ("garden", "gardens", "Garten", "Gärten", "m"),
    ("school", "schools", "Schule", "Schulen", "f"),
    ("boat", "boats", "Boot", "Boote", "n"),
    ("mountain", "mountains", "Berg", "Berge", "m"),
    ("cup", "cups", "Tasse", "Tassen", "f"),
    ("train", "trains", "Zug", "Züge", "m"),
    ("farmer", "farmers", "Bauer", "Bauern", "m"),
    ("shoe", "shoes", "Schuh", "Schuhe", "m"),
]
# verb: english 3sg, english plural, english participle, german 3sg, german 3pl, german participle
VERBS = [
    ("sees", "see", "seen", "sieht", "sehen", "gesehen"),
    ("finds", "find", "found", "findet", "finden", "gefunden"),
    ("buys", "buy", "bought", "kauft", "kaufen", "gekauft"),
    ("likes", "like", "liked", "mag", "mögen", "gemocht"),
    ("paints", "paint", "painted", "malt", "malen", "gemalt"),
    ("carries", "carry", "carried", "trägt", "tragen", "getragen"),
    ("opens", "open", "opened", "öffnet", "öffnen", "geöffnet"),
    ("follows", "follow", "followed", "verfolgt", "verfolgen", "verfolgt"),
    ("hears", "hear", "heard", "hört", "hören", "gehört"),
    ("visits", "visit", "visited", "besucht", "besuchen", "besucht"),
    ("cleans", "clean", "cleaned", "putzt", "putzen", "geputzt"),
    ("draws", "draw", "drawn", "zeichnet", "zeichnen", "gezeichnet"),
    ("sells", "sell", "sold", "verkauft", "verkaufen", "verkauft"),
    ("holds", "hold", "held", "hält", "halten", "gehalten"),
    ("watches", "watch", "watched", "beobachtet", "beobachten", "beobachtet"),
    ("loves", "love", "loved", "liebt", "lieben", "geliebt"),
    ("searches", "search", "searched", "sucht", "suchen", "gesucht"),
    ("brings", "bring", "brought", "bringt", "bringen", "gebracht"),
]
ADJECTIVES = [
    ("small", "klein"),
    ("big", "groß"),
    ("old", "alt"),
    ("young", "jung"),
    ("red", "rot"),
    ("blue", "blau"),
    ("green", "grün"),
    ("beautiful", "schön"),
    ("new", "neu"),
    ("fast", "schnell"),
    ("quiet", "still"),
    ("happy", "glücklich"),
    ("tired", "müde"),
    ("strong", "stark"),
    ("brown", "braun"),
    ("white", "weiß"),
    ("dark", "dunkel"),
    ("clever", "klug"),
    ("heavy", "schwer"),
    ("warm", "warm"),
]
PREPOSITIONS = [
    ("in", "in"),
    ("on", "auf"),
    ("with", "mit"),
    ("near", "neben"),
    ("behind", "hinter"),
    ("under", "unter"),
    ("from", "von"),
]
ADVERBS = [
    ("today", "heute"),
    ("often", "oft"),
    ("now", "jetzt"),
    ("sometimes", "manchmal"),
    ("again", "wieder"),
    ("there", "dort"),
    ("later", "später"),
]
SUBORDINATORS = [
    ("because", "weil"),
    ("when", "wenn"),
    ("although", "obwohl"),
    ("while", "während"),
    ("and I think that", "und ich glaube , dass"),
]
COORDINATORS = [("and", "und"), ("but", "aber")]

# A small lexicon keeps the corpus about structure (agreement, reordering) rather than word lists, so that a
# CPU-sized model learns it within minutes; the lists above hold more for those who want a harder corpus.
LEXICON = {"nouns": 16, "verbs": 8, "adjectives": 8}

CASES = ("nom", "acc", "dat")
DEFINITE = {
    "nom": {"m": "der", "f": "die", "n": "das", "p": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "p": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "p": "den"},
}
INDEFINITE = {
    "nom": {"m": "ein", "f": "eine", "n": "ein"},
    "acc": {"m": "einen", "f": "eine", "n": "ein"},
    "dat": {"m": "einem", "f": "einer", "n": "einem"},
}
# Adjective endings: weak after the definite article, mixed after the indefinite one, strong with none.
WEAK = {
    "nom": {"m": "e", "f": "e", "n": "e", "p": "en"},
    "acc": {"m": "en", "f": "e", "n": "e", "p": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "p": "en"},
}
MIXED = {
    "nom": {"m": "er", "f": "e", "n": "es"},
    "acc": {"m": "en", "f": "e", "n": "es"},
    "dat": {"m": "en", "f": "en", "n": "en"},
}
STRONG_PLURAL = {"nom": "e", "acc": "e", "dat": "en"}


@dataclass
class Phrase:
    en: list[str]
    de: list[str]
    plural: bool = False
    gender: str = "m"


def _adj_de(stem: str, ending: str) -> str:
    if stem.endswith("el") and ending:  # dunkel -> dunkle (e-elision)
        stem = stem[:-2] + "l"
    if stem.endswith("e") and ending.startswith("e"):  # müde -> müde, müden
        ending = ending[1:]
    return stem + ending


def noun_phrase(rng: random.Random, case: str, allow_relative: bool, depth: int) -> Phrase:
    en_sg, en_pl, de_sg, de_pl, gender = rng.choice(NOUNS[: LEXICON["nouns"]])
    plural = rng.random() < 0.3
    article = rng.choice(["def", "def", "indef"])
    adjs = rng.sample(ADJECTIVES[: LEXICON["adjectives"]], k=rng.choice([0, 0, 1, 1, 2]))
    g = "p" if plural else gender
    if article == "def":
        en, de, endings = ["the"], [DEFINITE[case][g]], WEAK[case][g]
    elif plural:
        en, de, endings = [], [], STRONG_PLURAL[case]
    else:
        en = ["an" if (adjs[0][0] if adjs else en_sg)[0] in "aeiou" else "a"]
        de, endings = [INDEFINITE[case][gender]], MIXED[case][gender]
    en += [a for a, _ in adjs]
    de += [_adj_de(d, endings) for _, d in adjs]
    noun_de = de_pl if plural else de_sg
    if plural and case == "dat" and not noun_de.endswith(("n", "s")):
        noun_de += "n"  # dative plural -n: den Hunden, den Kindern
    en.append(en_pl if plural else en_sg)
    de.append(noun_de)
    phrase = Phrase(en, de, plural, gender)
    if allow_relative and depth < 2 and rng.random() < 0.15:
        # "the dog that sees the cat" -> "der Hund , der die Katze sieht ,": pronoun agrees, verb final.
        verb = rng.choice(VERBS[: LEXICON["verbs"]])
        obj = noun_phrase(rng, "acc", False, depth + 1)
        phrase.en += ["that", verb[1] if plural else verb[0]] + obj.en
        phrase.de += [",", DEFINITE["nom"][g]] + obj.de + [verb[4] if plural else verb[3], ","]
    return phrase


def prep_phrase(rng: random.Random, depth: int) -> Phrase:
    en, de = rng.choice(PREPOSITIONS)
    np_ = noun_phrase(rng, "dat", False, depth + 1)
    return Phrase([en] + np_.en, [de] + np_.de)


def clause(rng: random.Random, subordinate: bool, depth: int) -> Phrase:
    """One clause. German order: V2 in main clauses, verb-final in subordinate ones; the perfect puts the
    participle at the end of the clause."""
    subj = noun_phrase(rng, "nom", True, depth)
    obj = noun_phrase(rng, "acc", True, depth)
    verb = rng.choice(VERBS[: LEXICON["verbs"]])
    pp = prep_phrase(rng, depth) if rng.random() < 0.5 else None
    adv = rng.choice(ADVERBS) if (not subordinate and rng.random() < 0.3) else None
    perfect = rng.random() < 0.35
    pl = subj.plural
    pp_en, pp_de = (pp.en, pp.de) if pp else ([], [])

    if perfect:
        en_verb = ["have" if pl else "has", verb[2]]
        finite, nonfinite = ("haben" if pl else "hat"), [verb[5]]
    else:
        en_verb = [verb[1] if pl else verb[0]]
        finite, nonfinite = (verb[4] if pl else verb[3]), []

    en = subj.en + en_verb + obj.en + pp_en
    if adv:
        en = [adv[0], ","] + en if rng.random() < 0.5 else en + [adv[0]]
    if subordinate:
        de = subj.de + obj.de + pp_de + nonfinite + [finite]
    elif adv:
        de = [adv[1], finite] + subj.de + obj.de + pp_de + nonfinite  # verb second
    else:
        de = subj.de + [finite] + obj.de + pp_de + nonfinite
    return Phrase(en, de)


def sentence(rng: random.Random) -> tuple[str, str]:
    main = clause(rng, subordinate=False, depth=0)
    en, de = list(main.en), list(main.de)
    r = rng.random()
    if r < 0.3:
        sub_en, sub_de = rng.choice(SUBORDINATORS)
        sub = clause(rng, subordinate=True, depth=1)
        en += [","] + sub_en.split() + sub.en
        de += [","] + sub_de.split() + sub.de
    elif r < 0.45:
        co_en, co_de = rng.choice(COORDINATORS)
        other = clause(rng, subordinate=False, depth=1)
        en += [",", co_en] + other.en
        de += [",", co_de] + other.de
    return _detok(en), _detok(de)


def _detok(words: list[str]) -> str:
    kept = [w for i, w in enumerate(words) if not (w == "," and (i + 1 == len(words) or words[i + 1] == ","))]
    text = " ".join(kept).replace(" ,", ",")
    text = text[0].upper() + text[1:] + "."
    return text


def generate(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


def builtin_splits(
    n_train: int, n_dev: int, n_test: int, seed: int = 1234
) -> dict[str, list[tuple[str, str]]]:
    """Dev, test, then train, with no source sentence of dev or test appearing anywhere else."""
    rng = random.Random(seed)
    heldout: set[str] = set()
    splits: dict[str, list[tuple[str, str]]] = {}
    for name, size in (("dev", n_dev), ("test", n_test), ("train", n_train)):
        out: list[tuple[str, str]] = []
        while len(out) < size:
            en, de = sentence(rng)
            if en in heldout:
                continue
            if name != "train":
                heldout.add(en)
            out.append((en, de))
        splits[name] = out
    return splits
