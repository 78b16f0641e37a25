"""``build-index`` and ``serve-retriever``."""

from __future__ import annotations

import argparse
from typing import Any

from agentflow_env.retrieval.index_store import build_index_command
from agentflow_env.retrieval.server import serve_corpus_file


def add_retrieval_commands(commands: Any) -> None:
    index = commands.add_parser("build-index", help="index a corpus JSONL once, cached on disk")
    index.add_argument("--corpus", required=True, help="corpus JSONL: {id, contents} per line")
    index.add_argument(
        "--out",
        default=None,
        help="cache dir; the index goes to OUT/<corpus_id> "
        "(default: $AGENTFLOW_ENV_CACHE/indexes or ~/.cache/agentflow_env/indexes)",
    )
    index.add_argument("--force", action="store_true", help="rebuild even if cached")
    index.set_defaults(handler=_build_index_command)

    serve = commands.add_parser(
        "serve-retriever", help="serve a corpus over Search-R1's POST /retrieve protocol"
    )
    serve.add_argument("--corpus", required=True, help="corpus JSONL: {id, contents} per line")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument("--topk", type=int, default=3, help="when a request gives none")
    serve.add_argument("--cache-dir", default=None, help="index cache dir (as build-index --out)")
    serve.add_argument("--no-cache", action="store_true", help="build in memory, skip the disk")
    serve.add_argument(
        "--batch-window-ms",
        type=float,
        default=2.0,
        help="how long a request waits for others to share one batched search",
    )
    serve.set_defaults(handler=_serve_retriever_command)


def _build_index_command(args: argparse.Namespace) -> int:
    return build_index_command(args.corpus, args.out, force=args.force)


def _serve_retriever_command(args: argparse.Namespace) -> int:
    return serve_corpus_file(
        args.corpus,
        host=args.host,
        port=args.port,
        topk=args.topk,
        cache_dir=args.cache_dir,
        use_cache=not args.no_cache,
        batch_window_s=args.batch_window_ms / 1000,
    )
