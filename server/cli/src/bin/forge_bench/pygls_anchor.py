"""forge-bench's pygls anchor: a no-op language server (docs/performance.md, "Anchors").

`initialize` is pygls's own; the command `forge.noop` returns null. Run by forge-bench with
the Python of tests/.venv (pygls pinned in tests/requirements.txt) or --python / FORGE_BENCH_PYTHON.
"""

try:  # pygls 2
    from pygls.lsp.server import LanguageServer
except ImportError:  # pygls 1
    from pygls.server import LanguageServer

server = LanguageServer("forge-bench-anchor", "v1")


@server.command("forge.noop")
def noop(ls, *args):
    return None


if __name__ == "__main__":
    server.start_io()
