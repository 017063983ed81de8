#!/usr/bin/env bash
# golden.sh KILN errors/NAME.kiln — `kiln check NAME.kiln [args]` must exit 1 with stderr
# equal to errors/NAME.expected (tests/support/golden.sh runs it).
exec bash "$(dirname "$0")/../support/golden.sh" check 1 err "$@"
