#!/usr/bin/env bash
# golden.sh KILN golden/NAME.kiln — `kiln passes NAME.kiln [args]` must exit 0 with its output
# (the printed graph and the explain lines: what each pass recorded, and why) equal to
# golden/NAME.expected (tests/support/golden.sh runs it). Regenerate one with:
# (cd golden && kiln passes NAME.kiln ARGS > NAME.expected)
exec bash "$(dirname "$0")/../support/golden.sh" passes 0 all "$@"
