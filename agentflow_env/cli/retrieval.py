"""``build-index`` and ``serve-retriever``."""

from __future__ import annotations

import argparse
from typing import Any

from agentflow_env.retrieval.dense import DEFAULT_DENSE_MODEL
from agentflow_env.retrieval.file_index import build_corpus_index_command
from agentflow_env.retrieval.hybrid import RETRIEVER_KINDS
from agentflow_env.retrieval.server import open_index, serve_corpus_file

CORPUS_HELP = "corpus file: JSONL ({id, contents} per line) or DPR TSV, optionally gzipped"


def add_retrieval_commands(commands: Any) -> None:
    index = commands.add_parser("build-index", help="index a corpus file once, cached on disk")
    index.add_argument("--corpus", required=True, help=CORPUS_HELP)
    index.add_argument(
        "--out",
        default=None,
        help="cache dir (default: $AGENTFLOW_ENV_CACHE/indexes or ~/.cache/agentflow_env/indexes)",
    )
    index.add_argument("--force", action="store_true", help="rebuild the BM25 index even if cached")
    _add_retriever_options(index, "also compute the dense embeddings (dense, hybrid)")
    index.set_defaults(handler=_build_index_command)

    serve = commands.add_parser(
        "serve-retriever", help="serve a corpus over Search-R1's POST /retrieve protocol"
    )
    serve.add_argument("--corpus", required=True, help=CORPUS_HELP)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument(
        "--topk", type=int, default=3, help="when a request gives none (or 0, as Search-R1)"
    )
    serve.add_argument("--cache-dir", default=None, help="index cache dir (as build-index --out)")
    serve.add_argument("--no-cache", action="store_true", help="build in memory, skip the disk")
    serve.add_argument(
        "--batch-window-ms",
        type=float,
        default=2.0,
        help="how long a request waits for others to share one batched search",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (SO_REUSEPORT) and the memory-mapped index",
    )
    _add_retriever_options(
        serve,
        "bm25 (keywords), dense (sentence-transformers + FAISS; pip install "
        "'agentflow-env[dense]') or hybrid (reciprocal-rank fusion of both, k=60)",
    )
    serve.set_defaults(handler=_serve_retriever_command)


def _add_retriever_options(parser: argparse.ArgumentParser, retriever_help: str) -> None:
    parser.add_argument("--retriever", choices=RETRIEVER_KINDS, default="bm25", help=retriever_help)
    parser.add_argument(
        "--dense-model",
        default=None,
        help="dense encoder: a local sentence-transformers directory or a Hugging Face name in "
        f"the local cache (default: {DEFAULT_DENSE_MODEL})",
    )
    parser.add_argument(
        "--query-prefix",
        default=None,
        help="prepended to each query before encoding (default: 'query: ' for e5 models, "
        "bge's instruction for bge models, else none)",
    )
    parser.add_argument(
        "--passage-prefix",
        default=None,
        help="prepended to each passage before encoding (default: 'passage: ' for e5 models, "
        "else none)",
    )


def _build_index_command(args: argparse.Namespace) -> int:
    status = build_corpus_index_command(args.corpus, args.out, force=args.force)
    if status or args.retriever == "bm25":
        return status
    _, facts = open_index(
        args.corpus,
        args.retriever,
        dense_model=args.dense_model,
        cache_dir=args.out,
        query_prefix=args.query_prefix,
        passage_prefix=args.passage_prefix,
    )
    dense = facts["dense"]
    state = "built" if dense["source"] == "built" else "already cached"
    print(f"dense embeddings {state} ({dense['dimension']} dimensions, {dense['seconds']:.1f} s)")
    return 0


def _serve_retriever_command(args: argparse.Namespace) -> int:
    return serve_corpus_file(
        args.corpus,
        host=args.host,
        port=args.port,
        topk=args.topk,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        batch_window_s=args.batch_window_ms / 1000,
        retriever=args.retriever,
        dense_model=args.dense_model,
        query_prefix=args.query_prefix,
        passage_prefix=args.passage_prefix,
        workers=args.workers,
    )
