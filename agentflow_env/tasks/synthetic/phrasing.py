"""Natural-language phrasings of question programs, sub-questions and plan steps.

Several phrasings per question type; sub-questions say "that director" rather than a name so
that they never leak an intermediate answer.
"""

from __future__ import annotations

from agentflow_env.tasks.synthetic.schema import CITY, WORK_TYPES

RELATION_PHRASES: dict[str, tuple[str, ...]] = {
    "birthplace": ("the birthplace of {x}", "the city where {x} was born"),
    "employer": ("the employer of {x}", "the organisation that employs {x}"),
    "country": ("the country of {x}", "the country in which {x} lies"),
    "capital": ("the capital of {x}", "the capital city of {x}"),
    "headquarters": ("the headquarters city of {x}", "the city where {x} is headquartered"),
    "founder": ("the founder of {x}", "the person who founded {x}"),
    "director": ("the director of {x}", "the person who directed {x}"),
    "studio": ("the studio that produced {x}", "the production studio of {x}"),
    "author": ("the author of {x}", "the writer of {x}"),
    "publisher": ("the publisher of {x}", "the publishing house that published {x}"),
    "artist": ("the artist who recorded {x}", "the recording artist of {x}"),
    "label": ("the record label of {x}", "the label that released {x}"),
}

FINAL_QUESTIONS: dict[str, tuple[str, ...]] = {
    "birth_year": (
        "When was {x} born?",
        "In what year was {x} born?",
        "What is the birth year of {x}?",
    ),
    "birthplace": (
        "Where was {x} born?",
        "In which city was {x} born?",
        "What is the birthplace of {x}?",
    ),
    "employer": (
        "Which organisation does {x} work for?",
        "Who employs {x}?",
        "What is the employer of {x}?",
    ),
    "country": (
        "In which country is {x}?",
        "Which country is {x} located in?",
        "{x} lies in which country?",
    ),
    "population": ("What is the population of {x}?", "How many people live in {x}?"),
    "capital": ("What is the capital of {x}?", "Which city is the capital of {x}?"),
    "independence_year": (
        "When did {x} become independent?",
        "In what year did {x} gain independence?",
    ),
    "founding_year": ("When was {x} founded?", "In what year was {x} established?"),
    "headquarters": (
        "Where is {x} headquartered?",
        "In which city does {x} have its headquarters?",
    ),
    "founder": ("Who founded {x}?", "Who is the founder of {x}?"),
    "director": ("Who directed {x}?", "Who is the director of {x}?"),
    "release_year": ("When was {x} released?", "In what year was {x} released?"),
    "studio": ("Which studio produced {x}?", "What studio made {x}?"),
    "author": ("Who wrote {x}?", "Who is the author of {x}?"),
    "publication_year": ("When was {x} published?", "In what year was {x} first published?"),
    "publisher": ("Who published {x}?", "Which publishing house published {x}?"),
    "artist": ("Who recorded {x}?", "Which artist recorded {x}?"),
    "label": ("Which record label released {x}?", "On which label was {x} released?"),
}

# What to call an intermediate entity in a sub-question ("that director").
ROLE_NOUNS: dict[str, str] = {
    "birthplace": "city",
    "employer": "organisation",
    "country": "country",
    "capital": "city",
    "headquarters": "city",
    "founder": "founder",
    "director": "director",
    "studio": "studio",
    "author": "author",
    "publisher": "publisher",
    "artist": "artist",
    "label": "label",
}

COMPARISON_QUESTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("birth_year", "earlier"): (
        "Who was born earlier, {a} or {b}?",
        "Who is older, {a} or {b}?",
        "Who was born first: {a} or {b}?",
    ),
    ("birth_year", "later"): ("Who was born later, {a} or {b}?", "Who is younger, {a} or {b}?"),
    ("population", "larger"): (
        "Which has the larger population, {a} or {b}?",
        "Which is more populous, {a} or {b}?",
    ),
    ("population", "smaller"): (
        "Which has the smaller population, {a} or {b}?",
        "Which is less populous, {a} or {b}?",
    ),
    ("founding_year", "earlier"): (
        "Which was founded earlier, {a} or {b}?",
        "Which was established first: {a} or {b}?",
    ),
    ("founding_year", "later"): (
        "Which was founded later, {a} or {b}?",
        "Which was established more recently, {a} or {b}?",
    ),
    ("release_year", "earlier"): (
        "Which was released earlier, {a} or {b}?",
        "Which came out first, {a} or {b}?",
    ),
    ("release_year", "later"): (
        "Which was released later, {a} or {b}?",
        "Which came out more recently, {a} or {b}?",
    ),
    ("publication_year", "earlier"): (
        "Which was published earlier, {a} or {b}?",
        "Which appeared in print first, {a} or {b}?",
    ),
    ("publication_year", "later"): (
        "Which was published later, {a} or {b}?",
        "Which appeared in print more recently, {a} or {b}?",
    ),
    ("independence_year", "earlier"): (
        "Which became independent earlier, {a} or {b}?",
        "Which gained independence first, {a} or {b}?",
    ),
    ("independence_year", "later"): (
        "Which became independent later, {a} or {b}?",
        "Which gained independence more recently, {a} or {b}?",
    ),
}
COMPARISON_OPERATIONS: dict[str, tuple[str, ...]] = {
    "population": ("larger", "smaller"),
}
COMPARISON_SUB_QUESTIONS: dict[str, str] = {
    "earlier": "Which of the two years is earlier?",
    "later": "Which of the two years is later?",
    "larger": "Which of the two populations is larger?",
    "smaller": "Which of the two populations is smaller?",
}

EVENT_NOUNS: dict[str, str] = {
    "birth_year": "the birth of {x}",
    "founding_year": "the founding of {x}",
    "release_year": "the release of {x}",
    "publication_year": "the publication of {x}",
    "independence_year": "the independence of {x}",
}
EVENT_CLAUSES: dict[str, str] = {
    "birth_year": "was {x} born",
    "founding_year": "was {x} founded",
    "release_year": "was {x} released",
    "publication_year": "was {x} published",
    "independence_year": "did {x} become independent",
}
YEAR_DIFFERENCE_QUESTIONS: tuple[str, ...] = (
    "How many years after {noun_b} {clause_a}?",
    "How many years passed between {noun_b} and {noun_a}?",
    "How many years separate {noun_b} and {noun_a}?",
)
AGE_QUESTION = "How old was {person} when {work} was {event}?"
AGE_EVENTS: dict[str, str] = {"release_year": "released", "publication_year": "published"}
POPULATION_DIFFERENCE_QUESTIONS: tuple[str, ...] = (
    "How many more people live in {a} than in {b}?",
    "By how much does the population of {a} exceed that of {b}?",
)
POPULATION_SUM_QUESTIONS: tuple[str, ...] = (
    "What is the combined population of {a} and {b}?",
    "How many people live in {a} and {b} together?",
)


def start_phrase(entity_type: str, name: str, variant: int = 0) -> str:
    """How a question names its starting entity: ``the film Vantoria``, ``the city of Keldra``."""
    if entity_type in WORK_TYPES:
        return f"the {entity_type} {name}"
    if entity_type == CITY and variant % 2 == 1:
        return f"the city of {name}"
    return name


def display_name(entity_type: str, name: str) -> str:
    """How a plan step names an entity (works carry their type)."""
    return f"the {entity_type} {name}" if entity_type in WORK_TYPES else name


def search_query(entity_type: str, name: str) -> str:
    """The Search query that finds an entity's document: its name, plus the type for works."""
    return f"{name} {entity_type}" if entity_type in WORK_TYPES else name


def relation_noun(relation: str) -> str:
    return "the " + relation.replace("_", " ")


def capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def with_article(noun: str) -> str:
    return ("an " if noun[:1] in "aeio" else "a ") + noun
