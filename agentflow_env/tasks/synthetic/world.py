"""A fictional world of people, places, organisations and works, generated from a seed.

The fact tables live here and are used only to generate questions and gold answers; solvers read
facts from retrieved text (``reader.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tasks.synthetic.builder import WorldBuilder
from agentflow_env.tasks.synthetic.entities import Entity, WorldConfig
from agentflow_env.tasks.synthetic.schema import SCHEMA, is_entity_kind

__all__ = ["Entity", "World", "WorldConfig", "generate_world"]


@dataclass(frozen=True, eq=False)
class World:
    """Entities with their facts, the confusable pairs, the corpus that describes them, and
    which entities are near-miss twins of others."""

    seed: int
    config: WorldConfig
    entities: tuple[Entity, ...]
    confusables: Mapping[str, tuple[str, ...]]
    """entity key -> keys of entities that share its name or a name token."""
    corpus: Corpus = field(repr=False)
    near_misses: Mapping[str, str] = field(default_factory=dict, repr=False)
    """twin key -> the key of the entity it imitates (``WorldConfig.distractors``)."""
    _by_key: dict[str, Entity] = field(init=False, repr=False)
    _by_type: dict[str, tuple[Entity, ...]] = field(init=False, repr=False)
    _doc_index: dict[str, int] = field(init=False, repr=False)
    _by_name: dict[tuple[str, str], Entity] = field(init=False, repr=False)
    _fact_table: dict[tuple[str, str], dict[str, str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {e.key: e for e in self.entities})
        object.__setattr__(self, "_by_name", {(e.name, e.type): e for e in self.entities})
        object.__setattr__(self, "_fact_table", {})
        doc_index = {doc.doc_id: i for i, doc in enumerate(self.corpus.documents)}
        object.__setattr__(self, "_doc_index", doc_index)
        by_type = {t: tuple(e for e in self.entities if e.type == t) for t in SCHEMA}
        object.__setattr__(self, "_by_type", by_type)

    def entity(self, key: str) -> Entity:
        return self._by_key[key]

    def find(self, name: str, entity_type: str) -> Entity:
        """The entity called ``name`` of ``entity_type`` (names are unique per type)."""
        return self._by_name[(name, entity_type)]

    def fact_table(self) -> dict[tuple[str, str], dict[str, str]]:
        """Every fact as (name, type) -> relation -> value text: the gold side of the reader."""
        if not self._fact_table:
            for e in self.entities:
                self._fact_table[(e.name, e.type)] = {
                    r: self.value_text(e, r) for r in e.attributes
                }
        return self._fact_table

    def of_type(self, entity_type: str) -> tuple[Entity, ...]:
        return self._by_type[entity_type]

    def target(self, entity: Entity, relation: str) -> Entity | None:
        """The entity ``relation`` points to, or ``None`` for a literal attribute."""
        if not is_entity_kind(SCHEMA[entity.type][relation]):
            return None
        return self._by_key[str(entity.attributes[relation])]

    def value_text(self, entity: Entity, relation: str) -> str:
        """An attribute as the documents state it (a target's name, a number in plain digits)."""
        target = self.target(entity, relation)
        return target.name if target is not None else str(entity.attributes[relation])

    def document(self, key: str) -> Document:
        """The document describing the entity ``key`` (document ids are entity keys)."""
        return self.corpus.documents[self._doc_index[key]]


def generate_world(seed: int, config: WorldConfig | None = None) -> World:
    """Build the world for ``seed``: same seed and config, same world, documents and ids."""
    built = WorldBuilder(seed, config or WorldConfig()).build()
    return World(
        seed, built.config, built.entities, built.confusables, built.corpus, built.near_misses
    )
