#!/usr/bin/env bash
# The API docs of every workspace crate build without a warning: broken or private intra-doc
# links, unclosed HTML, bare URLs and the rest of rustdoc's lints fail the step (as clippy's
# warnings do).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
