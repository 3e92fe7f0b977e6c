#!/bin/sh
# The compiler launcher of the compile-only checks (built with -fsyntax-only: templates are
# instantiated and checked, no code is generated). The compiler writes no object then, so this
# touches the one the build asked for (-o), and the check is built again only when its sources
# change. The command's status is the launcher's.
object=
previous=
for argument in "$@"; do
  [ "$previous" = "-o" ] && object=$argument
  previous=$argument
done
"$@" || exit
[ -n "$object" ] && touch "$object"
