#!/bin/sh
# version.sh: the package version for a `git describe --tags --always
# --dirty` string (the top-level Makefile's VERSION), in a form dpkg and
# opkg accept and order as releases are ordered.
#
#   sh cross/version.sh v1.2.3-4-gabc1234      ->  1.2.3+4.gabc1234
#
#   v1.2.3                  1.2.3
#   v1.2.3-4-gabc1234       1.2.3+4.gabc1234    after 1.2.3, before 1.2.4
#   v1.2.3-rc.1             1.2.3~rc.1          before 1.2.3 (~ sorts first)
#   v1.2.3-rc.1-4-gabc1234  1.2.3~rc.1+4.gabc1234
#   v1.2.3-dirty            1.2.3+dirty
#   abc1234[-dirty]         0.0.0+git.abc1234[.dirty]  (no tag yet)
#
# The result has no hyphen: there is no Debian revision, the upstream
# version is the whole string. Without an argument it runs git describe.
set -eu

desc=${1:-$(git describe --tags --always --dirty 2>/dev/null || echo unknown)}
v=${desc#v}
dirty=''
case $v in
*-dirty)
	v=${v%-dirty}
	dirty=dirty
	;;
esac

# A describe past a tag ends in -<commits>-g<hash>.
ahead=''
tail=$(printf '%s\n' "$v" | sed -n 's/^.*-\([0-9][0-9]*\)-g\([0-9a-f][0-9a-f]*\)$/\1.g\2/p')
if [ -n "$tail" ]; then
	ahead=$tail
	v=$(printf '%s\n' "$v" | sed 's/-[0-9][0-9]*-g[0-9a-f][0-9a-f]*$//')
fi

# No tag yet: --always printed the abbreviated commit, seven or more hex
# digits (which a tag of digits alone would look like too).
commit=''
case $v in
*[!0-9a-f]* | '') ;;
*) [ ${#v} -lt 7 ] || commit=$v ;;
esac
case $v in
"$commit")
	v=0.0.0+git.$commit
	;;
[0-9]*)
	# The first hyphen starts a pre-release: ~ sorts it before the
	# release. dpkg allows no other hyphen without a revision, nor _.
	v=$(printf '%s\n' "$v" | sed 's/-/~/; s/[-_]/./g')
	;;
*)
	echo "version.sh: $desc is neither a version tag nor a commit" >&2
	exit 1
	;;
esac

extra=$ahead
[ -z "$dirty" ] || extra=${extra:+$extra.}$dirty
case $v in
*+*) [ -z "$extra" ] || v=$v.$extra ;;
*) [ -z "$extra" ] || v=$v+$extra ;;
esac

case $v in
*[!0-9A-Za-z.+~]*)
	echo "version.sh: cannot make a package version of $desc (got $v)" >&2
	exit 1
	;;
esac
printf '%s\n' "$v"
