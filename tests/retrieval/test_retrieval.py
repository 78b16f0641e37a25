"""BM25 retrieval: tokenization, ranking, odd queries, batching and the shared index cache."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest

from agentflow_env.retrieval.bm25 import (
    BM25Index,
    cached_index_ids,
    clear_index_cache,
    get_index,
    rank_rows,
    set_index_cache_size,
    tokenize_for_search,
)
from agentflow_env.retrieval.corpus import Corpus, Document

DOCS = (
    Document("d0", "Marie Curie", "Physicist and chemist who pioneered research on radioactivity."),
    Document(
        "d1",
        "Pierre Curie",
        "French physicist who studied crystallography and piezoelectricity with his brother "
        "Jacques; he married Marie in 1895.",
    ),
    Document("d2", "Eiffel Tower", "Wrought-iron lattice tower in Paris, completed in 1889."),
    Document("d3", "Paris", "Paris is the capital of France, home of the Eiffel Tower."),
    Document("d4", "Zürich", "Largest city in Switzerland, on Lake Zürich."),
    Document("d5", "Empty page", ""),
)


@pytest.fixture
def corpus() -> Corpus:
    return Corpus.from_documents(DOCS)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_index_cache()
    set_index_cache_size(256)
    yield
    clear_index_cache()
    set_index_cache_size(256)


def test_tokenize_lowercases_unicode_words_without_stemming() -> None:
    assert tokenize_for_search("Zürich's Eiffel-Tower, 1889!") == [
        "zürich",
        "s",
        "eiffel",
        "tower",
        "1889",
    ]
    assert tokenize_for_search("the running") == ["the", "running"]
    assert tokenize_for_search("  ...  ") == []


@pytest.mark.parametrize("doc", DOCS[:5], ids=lambda doc: doc.doc_id)
def test_exact_title_ranks_its_document_first(corpus: Corpus, doc: Document) -> None:
    hits = BM25Index(corpus).search(doc.title, k=3)
    assert hits[0][0] == doc
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 for score in scores)


def test_unicode_query_matches(corpus: Corpus) -> None:
    hits = BM25Index(corpus).search("ZÜRICH", k=2)
    assert [doc.doc_id for doc, _ in hits] == ["d4"]


@pytest.mark.parametrize("query", ["", "   ", "?!", "xylophone quasar", "ÿÿÿ"])
def test_empty_and_unknown_queries_return_nothing(corpus: Corpus, query: str) -> None:
    index = BM25Index(corpus)
    assert index.search(query, k=3) == []
    assert index.search_batch([query, query], k=3) == [[], []]


def test_unknown_tokens_are_ignored_next_to_known_ones(corpus: Corpus) -> None:
    hits = BM25Index(corpus).search("xylophone radioactivity", k=3)
    assert [doc.doc_id for doc, _ in hits] == ["d0"]


def test_k_is_capped_and_only_positive_scores_are_returned(corpus: Corpus) -> None:
    index = BM25Index(corpus)
    hits = index.search("tower", k=100)
    assert {doc.doc_id for doc, _ in hits} == {"d2", "d3"}
    assert index.search("tower", k=0) == []
    assert len(index.search("tower", k=1)) == 1


def test_batch_equals_individual_searches(corpus: Corpus) -> None:
    index = BM25Index(corpus)
    queries = ["Marie Curie", "", "Paris tower", "unknownword", "physicist", "Zürich lake"]
    batch = index.search_batch(queries, k=3)
    assert batch == [index.search(query, k=3) for query in queries]
    assert index.search_batch([], k=3) == []


def test_ranking_equals_bm25s_retrieve_exactly_ties_included() -> None:
    """``rank_rows`` skips ``retrieve``'s per-call overhead: the same scores, bit for bit, and
    the same documents where the k-th score is tied (here, many identical documents)."""
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    docs = [
        Document(str(i), f"T{i % 7}", " ".join(rng.choices(words, k=rng.randint(1, 4))))
        for i in range(300)
    ]
    index = BM25Index(Corpus.from_documents(docs))
    retriever, vocab = index.retriever, index.vocab
    assert retriever is not None
    for _ in range(300):
        query = " ".join(rng.choices([*words, "t3", "t5", "unknown"], k=rng.randint(1, 5)))
        k = rng.choice([1, 2, 3, 10])
        ids = [vocab[t] for t in tokenize_for_search(query) if t in vocab]
        expected: list[tuple[int, float]] = []
        if ids:
            rows, scores = retriever.retrieve([ids], k=k, show_progress=False)
            pairs = zip(rows[0].tolist(), scores[0].tolist(), strict=True)
            expected = sorted(((r, s) for r, s in pairs if s > 0), key=lambda h: (-h[1], h[0]))
        assert rank_rows(retriever, vocab, [query], k, len(docs)) == [expected]


def test_degenerate_corpora_do_not_raise() -> None:
    assert BM25Index(Corpus(())).search("anything", k=3) == []
    no_tokens = Corpus.from_documents([Document("a", "", ""), Document("b", "!!", "...")])
    assert BM25Index(no_tokens).search_batch(["a", ""], k=3) == [[], []]
    single = Corpus.from_documents([Document("a", "Solo", "only document")])
    assert [doc.doc_id for doc, _ in BM25Index(single).search("solo", k=5)] == ["a"]


def test_get_index_returns_the_same_object_per_corpus_id(corpus: Corpus) -> None:
    first = get_index(corpus)
    assert get_index(corpus) is first
    assert get_index(Corpus.from_documents(DOCS)) is first  # same content, same fingerprint
    other = Corpus.from_documents(DOCS[:2])
    assert get_index(other) is not first


def test_racing_threads_build_the_index_exactly_once(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[str] = []

    def counting_build(corpus: Corpus) -> BM25Index:
        builds.append(corpus.corpus_id)
        time.sleep(0.05)  # widen the race window
        return BM25Index(corpus)

    barrier = threading.Barrier(16)
    results: list[BM25Index] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        index = get_index(corpus, build=counting_build)
        with lock:
            results.append(index)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == [corpus.corpus_id]
    assert len(results) == 16
    assert all(index is results[0] for index in results)


def test_cache_is_lru_bounded() -> None:
    set_index_cache_size(2)
    corpora = [
        Corpus.from_documents([Document(str(i), f"Title {i}", f"text {i}")]) for i in range(3)
    ]
    a = get_index(corpora[0])
    get_index(corpora[1])
    assert get_index(corpora[0]) is a  # touch 0, so 1 is now least recently used
    get_index(corpora[2])
    assert cached_index_ids() == [corpora[0].corpus_id, corpora[2].corpus_id]
    assert get_index(corpora[0]) is a
    set_index_cache_size(1)
    assert cached_index_ids() == [corpora[0].corpus_id]
    with pytest.raises(ValueError):
        set_index_cache_size(0)


def test_evicted_index_is_rebuilt() -> None:
    set_index_cache_size(1)
    first = Corpus.from_documents([Document("a", "Alpha", "first")])
    second = Corpus.from_documents([Document("b", "Beta", "second")])
    old = get_index(first)
    get_index(second)
    rebuilt = get_index(first)
    assert rebuilt is not old
    assert rebuilt.search("alpha", k=1)[0][0].doc_id == "a"
