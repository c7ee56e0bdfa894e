#!/bin/sh
# install.sh: install or upgrade openflare-agent on an edge node.
#
#   sh install.sh --binary ./openflare-agent-linux-arm64 \
#       --server-url https://openflare.example.com --discovery-token TOKEN
#
# Debian, Ubuntu, Raspberry Pi OS: the binary goes to
# /usr/local/lib/openflare-agent, linked from /usr/local/bin, and a systemd
# unit runs it as root in a sandbox. OpenWrt (detected from
# /etc/openwrt_release): /usr/bin and a procd init script, also as root.
# Either way nginx's workers run as a system user of their own,
# openflare-www (agent.json nginx_user, which a new install creates and
# pins), and cannot read the agent's files.
# The unit and the init script are taken from systemd/ and openwrt/ next to
# this script, as in the release archive.
#
# The data directory is /var/lib/openflare, or /etc/openflare/data on
# OpenWrt, where /var is a tmpfs: there the config, state and backups stay
# on flash while agent.json's access_log_path puts nginx's logs, pid, temp
# files and cache (derived from /var/log/openflare/access.log: under /var)
# in RAM. Earlier installs ran the agent as the user openflare; their
# files in /etc/openflare and the data directory are handed back to root
# (recursively, never through a symlink), so / and top-level or system
# directories are refused as data directory.
#
# Tokens can come from OPENFLARE_AGENT_TOKEN or OPENFLARE_DISCOVERY_TOKEN
# instead of the command line, which keeps them out of the process list.
# They are never printed.
#
# Running it again upgrades: the same files with the same modes (a binary
# that earlier installs put in /usr/local/bin itself becomes the link). An
# agent_token already in agent.json (the node has registered) is kept unless
# --agent-token is given, and keys this script does not set are kept as
# they are.

# Tracing would print tokens: this script never runs traced, not even
# under sh -x.
set +x
set -eu
LC_ALL=C
export LC_ALL
umask 022

usage() {
	cat <<'EOF'
usage: install.sh --binary PATH [options]
  --binary PATH            the downloaded openflare-agent binary (required)
  --sha256 HEX             its SHA-256 (default: the first word of PATH.sha256)
  --server-url URL         control plane URL (required unless agent.json has one)
  --discovery-token TOKEN  register as a new node (or OPENFLARE_DISCOVERY_TOKEN)
  --agent-token TOKEN      an existing node's token (or OPENFLARE_AGENT_TOKEN)
  --node-name NAME         node name (default: the host name)
  --openresty-path PATH    nginx or OpenResty binary (default: openresty on PATH)
  --data-dir DIR           the agent's data directory (default: /var/lib/openflare,
                           on OpenWrt /etc/openflare/data)
  --root DIR               install under DIR instead of / (nothing is started)
EOF
}

say() { printf '%s\n' "$*"; }
die() {
	printf 'install.sh: %s\n' "$*" >&2
	exit 1
}

binary='' sha256='' server_url='' node_name='' openresty_path='' data_dir='' root=/
discovery_token=${OPENFLARE_DISCOVERY_TOKEN:-}
agent_token=${OPENFLARE_AGENT_TOKEN:-}
while [ $# -gt 0 ]; do
	opt=$1
	case $opt in
	-h | --help)
		usage
		exit 0
		;;
	--*=*)
		val=${opt#*=}
		opt=${opt%%=*}
		shift
		;;
	--*)
		[ $# -ge 2 ] || die "$opt needs a value"
		val=$2
		shift 2
		;;
	*)
		# Not echoed: a stray argument may well be a token.
		usage >&2
		die "unexpected argument (options start with --)"
		;;
	esac
	case $opt in
	--binary) binary=$val ;;
	--sha256) sha256=$val ;;
	--server-url) server_url=$val ;;
	--discovery-token) discovery_token=$val ;;
	--agent-token) agent_token=$val ;;
	--node-name) node_name=$val ;;
	--openresty-path) openresty_path=$val ;;
	--data-dir) data_dir=$val ;;
	--root) root=$val ;;
	*)
		usage >&2
		die "unknown option: $opt"
		;;
	esac
done
unset val

[ -n "$binary" ] || die "--binary is required"
[ -f "$binary" ] || die "binary $binary not found"
[ -z "$discovery_token" ] || [ -z "$agent_token" ] || die "give --discovery-token or --agent-token, not both"
case $data_dir in
'' | /*) ;;
*) die "--data-dir must be an absolute path" ;;
esac
[ -d "$root" ] || die "--root $root is not a directory"
root=$(cd "$root" && pwd -P)
# prefix is prepended to every installed path; empty when installing to /.
prefix=${root%/}
if [ -z "$prefix" ] && [ "$(id -u)" != 0 ]; then
	die "installing to / needs root"
fi
here=$(cd "$(dirname "$0")" && pwd -P)

# Temporary files, removed however the script ends.
tmp='' unit='' dest='' link_path=''
cleanup() {
	[ -z "$tmp" ] || rm -f "$tmp" "$tmp.kept"
	[ -z "$unit" ] || rm -f "$unit"
	[ -z "$dest" ] || rm -f "$dest.new"
	[ -z "$link_path" ] || rm -f "$link_path.new"
}
trap cleanup EXIT

# --- Verify the binary before touching anything. ---
if [ -z "$sha256" ]; then
	[ -f "$binary.sha256" ] || die "no checksum: pass --sha256 or put $binary.sha256 next to the binary"
	read -r sha256 _ <"$binary.sha256" || true
fi
sha256=$(printf '%s' "$sha256" | tr 'A-F' 'a-f')
case $sha256 in
*[!0-9a-f]*) die "--sha256 is not a hex SHA-256" ;;
esac
[ ${#sha256} -eq 64 ] || die "--sha256 is not a hex SHA-256"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"
actual=$(sha256sum <"$binary")
actual=${actual%% *}
[ "$actual" = "$sha256" ] || die "sha256 mismatch for $binary: expected $sha256, got $actual; nothing installed"
say "verified $binary (sha256 $actual)"

# --- JSON helpers. ---

# json_escape STRING: STRING as the inside of a JSON string literal.
json_escape() {
	s=$1 out=''
	while [ -n "$s" ]; do
		rest=${s#?}
		c=${s%"$rest"}
		s=$rest
		case $c in
		\\) out="$out\\\\" ;;
		\") out="$out\\\"" ;;
		[[:cntrl:]]) out="$out$(printf '\\u%04x' "'$c")" ;;
		*) out="$out$c" ;;
		esac
	done
	printf '%s' "$out"
}

# The top-level members of a JSON object file, one per line as "key": value
# with the whitespace outside strings dropped. With want=KEY only that
# member's raw value is printed; keys in drop (space-separated) are left out.
# Exits 3 when the file is not one JSON object.
# shellcheck disable=SC2016 # an awk program: $0 is awk's, not the shell's
json_members_awk='
function emit() {
	if (val == "") exit 3
	if (want != "") { if (key == "\"" want "\"") print val; return }
	if (!(key in skip)) print key ": " val
}
BEGIN { n = split(drop, d, " "); for (i = 1; i <= n; i++) skip["\"" d[i] "\""] = 1 }
{ text = text $0 "\n" }
END {
	st = "open"; instr = 0; esc = 0; depth = 0
	len = length(text)
	for (i = 1; i <= len; i++) {
		c = substr(text, i, 1)
		if (instr) {
			if (st == "key") key = key c; else val = val c
			if (esc) esc = 0
			else if (c == "\\") esc = 1
			else if (c == "\"") { instr = 0; if (st == "key") st = "colon" }
			continue
		}
		if (c == " " || c == "\t" || c == "\n" || c == "\r") continue
		if (st == "open") { if (c != "{") exit 3; st = "first"; continue }
		if (st == "done") exit 3
		if (st == "first" || st == "next") {
			if (st == "first" && c == "}") { st = "done"; continue }
			if (c != "\"") exit 3
			key = c; instr = 1; st = "key"; continue
		}
		if (st == "colon") { if (c != ":") exit 3; st = "value"; val = ""; continue }
		if (depth == 0 && (c == "," || c == "}")) {
			emit()
			st = (c == ",") ? "next" : "done"
			continue
		}
		if (c == "{" || c == "[") depth++
		else if (c == "}" || c == "]") { if (--depth < 0) exit 3 }
		else if (c == "\"") instr = 1
		val = val c
	}
	if (st != "done") exit 3
}'

# json_get FILE KEY: the raw JSON value of a top-level key ("" if absent).
json_get() { awk -v want="$2" "$json_members_awk" "$1"; }

# --- Data directory checks. ---

# clean_path PATH: absolute PATH without repeated or trailing slashes and
# "." components. Fails on a ".." component, which only the file system
# could resolve.
clean_path() (
	set -f
	IFS=/
	out=''
	for c in $1; do
		case $c in
		'' | .) ;;
		..) exit 1 ;;
		*) out="$out/$c" ;;
		esac
	done
	printf '%s\n' "${out:-/}"
)

# data_dir_problem DIR: why the clean absolute DIR cannot be the data
# directory, or nothing. The installer hands the data directory recursively
# to root, so it must be a directory of the agent's own, never a tree of the system
# (the directory itself: paths below such a tree are fine). Every top-level
# directory is refused; the system ones are named for a clearer message.
data_dir_problem() {
	case $1 in
	/) echo "the root directory" ;;
	/usr/local | /usr/bin | /usr/sbin | /usr/lib | /usr/lib32 | /usr/lib64 | /usr/libx32 | /usr/libexec | /usr/share | /usr/include | \
		/var/lib | /var/log | /var/cache | /var/tmp | /var/spool | /var/run | /var/lock | /var/www) echo "a system directory" ;;
	/*/*) ;;
	/usr | /etc | /var | /bin | /sbin | /lib | /lib32 | /lib64 | /libx32 | /boot | /dev | /proc | /sys | /run | \
		/home | /root | /srv | /opt | /tmp) echo "a system directory" ;;
	*) echo "a top-level directory" ;;
	esac
}

# check_data_dir DIR SOURCE: die, before anything is changed, unless DIR
# may be the data directory. SOURCE says where DIR came from.
check_data_dir() {
	case $1 in
	/*) ;;
	*) die "data_dir $1 ($2) is not an absolute path; nothing changed" ;;
	esac
	cd_clean=$(clean_path "$1") || die "data_dir $1 ($2) has a .. component: give the plain path; nothing changed"
	why=$(data_dir_problem "$cd_clean")
	# An existing directory is also checked where it really is: a symlink
	# to / or /usr must not get chown -R either.
	if [ -z "$why" ] && [ -d "$prefix$cd_clean" ]; then
		phys=$(cd -P "$prefix$cd_clean" && pwd -P) || die "data_dir $1 ($2): cannot resolve it; nothing changed"
		case $phys in
		"$prefix") phys=/ ;;
		"$prefix"/*) phys=${phys#"$prefix"} ;;
		esac
		why=$(data_dir_problem "$phys")
		[ -z "$why" ] || why="$why ($phys)"
	fi
	[ -z "$why" ] || die "data_dir $1 ($2) is $why: the installer hands the data directory recursively to root, so it must be a directory of its own such as /var/lib/openflare or /etc/openflare/data; nothing changed"
}

# --- Where things go. ---
# Under systemd the sandbox lets the agent write its binary's directory
# for self-update, so the binary gets a directory of its own rather than
# making all of /usr/local/bin writable; the command line finds it through
# a symbolic link. OpenWrt has no sandbox, and /usr/bin is writable.
link=''
if [ -f "$prefix/etc/openwrt_release" ]; then
	platform=openwrt
	bin_dir=/usr/bin
	svc_src=$here/openwrt/openflare-agent.init
else
	platform=systemd
	bin_dir=/usr/local/lib/openflare-agent
	link=/usr/local/bin/openflare-agent
	svc_src=$here/systemd/openflare-agent.service
fi
[ -f "$svc_src" ] || die "$svc_src not found: run install.sh from the release archive (or cross/); nothing installed"
if [ -n "$link" ]; then
	# The unit makes this directory writable: a symlink would widen that
	# to wherever it points.
	[ ! -L "$prefix$bin_dir" ] || die "$bin_dir is a symbolic link: make it a plain directory; nothing changed"
	# mv would put the new link inside a directory instead of replacing it.
	[ ! -d "$prefix$link" ] || die "$link is a directory: remove it; nothing changed"
fi
conf_dir=/etc/openflare
conf=$conf_dir/agent.json
real_root=false
[ -n "$prefix" ] || real_root=true

# --- agent.json: managed keys from the options, every other key kept. ---
existing_token=''
existing_data_dir=''
existing_server_url=''
existing_discovery=''
existing_access_log=''
# The installer and the agent write agent.json as root: through a symlink
# (which the old service user could have planted) that would land anywhere.
[ ! -L "$prefix$conf" ] || die "$conf is a symbolic link: make it a plain file; nothing changed"
if [ -f "$prefix$conf" ]; then
	json_get "$prefix$conf" server_url >/dev/null || die "$conf is not a JSON object: fix or remove it"
	existing_token=$(json_get "$prefix$conf" agent_token)
	existing_discovery=$(json_get "$prefix$conf" discovery_token)
	existing_server_url=$(json_get "$prefix$conf" server_url)
	existing_data_dir=$(json_get "$prefix$conf" data_dir)
	existing_access_log=$(json_get "$prefix$conf" access_log_path)
fi
has_value() { [ -n "$1" ] && [ "$1" != '""' ] && [ "$1" != null ]; }

[ -n "$server_url" ] || has_value "$existing_server_url" || die "--server-url is required"
drop=''
token_note=''
if [ -n "$agent_token" ]; then
	drop="agent_token discovery_token"
	token_note='agent_token ****'
elif has_value "$existing_token"; then
	token_note='agent_token **** (kept: the node has registered)'
	discovery_token=''
elif [ -n "$discovery_token" ]; then
	drop="agent_token discovery_token"
	token_note='discovery_token ****'
elif has_value "$existing_discovery"; then
	token_note='discovery_token **** (kept)'
else
	die "no token: pass --discovery-token or --agent-token"
fi
[ -z "$server_url" ] || drop="$drop server_url"
[ -z "$node_name" ] || drop="$drop node_name"
[ -z "$openresty_path" ] || drop="$drop openresty_path"
# The data directory the agent uses now, when it has an agent.json: without
# data_dir it is data/ beside agent.json.
current_data_dir=''
[ ! -f "$prefix$conf" ] || current_data_dir=$conf_dir/data
if has_value "$existing_data_dir"; then
	current_data_dir=${existing_data_dir#\"}
	current_data_dir=${current_data_dir%\"}
fi
if [ -n "$data_dir" ]; then
	drop="$drop data_dir"
	check_data_dir "$data_dir" "--data-dir"
elif has_value "$existing_data_dir"; then
	data_dir=$current_data_dir
	case $data_dir in
	/*) ;;
	*) die "data_dir in $conf is not an absolute path; pass --data-dir" ;;
	esac
	case $data_dir in
	*\\*) die "data_dir in $conf has escapes; pass --data-dir" ;;
	esac
	check_data_dir "$data_dir" "from $conf; pass --data-dir"
elif [ "$platform" = openwrt ]; then
	# /var is a tmpfs on OpenWrt: the data directory goes on flash.
	data_dir=/etc/openflare/data
	drop="$drop data_dir"
else
	data_dir=/var/lib/openflare
	drop="$drop data_dir"
fi

# On OpenWrt nginx's access log, and with it its error log, pid, temp files
# and cache (the agent puts them under the directory three levels above the
# access log: /var), go to RAM rather than wearing the flash. An
# access_log_path already in agent.json is kept. So is the layout of an
# installed agent whose data directory stays the same: moving the pid file
# from under a running nginx would make the agent lose it.
access_log_path=''
if [ "$platform" = openwrt ]; then
	data_in_ram=false
	case $data_dir/ in
	/var/* | /tmp/*) data_in_ram=true ;;
	esac
	if has_value "$existing_access_log"; then
		:
	elif [ ! -f "$prefix$conf" ] || [ "$data_dir" != "$current_data_dir" ]; then
		access_log_path=/var/log/openflare/access.log
		drop="$drop access_log_path"
	elif ! $data_in_ram; then
		say "note: agent.json sets no access_log_path, so nginx's logs, pid, temp files and cache stay on flash under $data_dir/var; left so under a running nginx (see cross/README.md)"
	fi
	if $data_in_ram; then
		say "warning: data_dir $data_dir is in RAM on OpenWrt (/var and /tmp are tmpfs): the landed config, state and backups are lost at every reboot; to keep them, stop the agent and nginx and re-run with --data-dir /etc/openflare/data"
	fi
fi

# --- Who nginx's workers are, and nodes of the service-user era. ---

# passwd_field NAME N: field N (3 uid, 4 gid) of NAME in the install root's
# /etc/passwd; group_name GID and group_id NAME: from its /etc/group. Read
# directly, as the agent (agent/osuser) and nginx do.
passwd_field() {
	[ ! -f "$prefix/etc/passwd" ] || awk -F: -v n="$1" -v f="$2" '$1 == n { print $f; exit }' "$prefix/etc/passwd"
}
group_name() {
	[ ! -f "$prefix/etc/group" ] || awk -F: -v g="$1" '$3 == g && g != "" { print $1; exit }' "$prefix/etc/group"
}
group_id() {
	[ ! -f "$prefix/etc/group" ] || awk -F: -v n="$1" '$1 == n { print $3; exit }' "$prefix/etc/group"
}
# json_str KEY: a plain string value of agent.json, or nothing (also for
# one with escapes, which this script does not decode).
json_str() {
	[ -f "$prefix$conf" ] || return 0
	v=$(json_get "$prefix$conf" "$1")
	case $v in
	\"*\") v=${v#\"} v=${v%\"} ;;
	*) v='' ;;
	esac
	case $v in
	*\\*) v='' ;;
	esac
	printf '%s' "$v"
}

# An operator who insists on a service user says so in a drop-in
# (docs/workers.md). Their files stay theirs, and
# nothing is pinned for workers that will share the agent's uid anyway.
service_user=''
if [ "$platform" = systemd ]; then
	for f in "$prefix/etc/systemd/system/openflare-agent.service.d"/*.conf; do
		[ -f "$f" ] || continue
		u=$(sed -n 's/^[[:space:]]*User=[[:space:]]*//p' "$f" | sed -n '$p')
		[ -z "$u" ] || service_user=$u
		if awk '/^[[:space:]]*ReadWritePaths=.*\/usr\/local\/bin/ { found = 1 } END { exit !found }' "$f"; then
			say "note: $f makes /usr/local/bin writable: self-update needs only /usr/local/lib/openflare-agent, which the unit allows; remove that line"
		fi
	done
	case $service_user in
	root | 0) service_user='' ;;
	esac
fi

# Earlier systemd installs ran the agent, and the nginx it started, as the
# system user openflare, which owned everything the agent wrote: any
# worker could read the node token, the keys and the state. Its files go
# back to root. The user itself stays: removing it could let a later
# system account take over its uid, and with it files of the old layout
# outside the agent's tree (old logs, copies an operator made).
of_uid='' of_gid=''
if [ "$platform" = systemd ] && [ -z "$service_user" ]; then
	of_uid=$(passwd_field openflare 3)
	of_gid=$(passwd_field openflare 4)
	case $of_uid in '' | 0 | *[!0-9]*) of_uid='' ;; esac
	case $of_gid in '' | 0 | *[!0-9]*) of_gid=$of_uid ;; esac
fi

mkdir -p "$prefix$conf_dir" "$prefix$data_dir" "$prefix$bin_dir"
if [ -n "$link" ]; then
	chmod 0755 "$prefix$bin_dir"
	if [ "$(id -u)" = 0 ]; then chown 0:0 "$prefix$bin_dir"; fi
fi
# Workers traverse the data directory (o+x) but cannot list it; the agent
# itself opens it so at start, and a re-run that closed it would cut the
# workers off until then. /etc/openflare holds agent.json (0600) and is
# closed unless the data directory lies within it, as on OpenWrt.
conf_mode=0750
case $data_dir/ in
"$conf_dir"/*) conf_mode=0751 ;;
esac
chmod "$conf_mode" "$prefix$conf_dir"
chmod 0751 "$prefix$data_dir"

# in_tree DIR: DIR is a directory inside data_dir or /etc/openflare, and
# really there: no symlink on the way down (one planted by the old
# service user must not lead a chmod or chown out of the trees).
in_tree() {
	it_dir=$(clean_path "$1") || return 1
	for top in "$data_dir" "$conf_dir"; do
		case $it_dir/ in
		"$top"/*)
			want=$(cd -P "$prefix$top" 2>/dev/null && pwd -P) || return 1
			got=$(cd -P "$prefix$it_dir" 2>/dev/null && pwd -P) || return 1
			[ "$got" != "$want${it_dir#"$top"}" ] || return 0
			;;
		esac
	done
	return 1
}

# service_user_files FIND-ACTION...: what the old service user owns in the
# agent's trees. DIR/. enters a data_dir that is a symlink (checked above);
# below it find never follows one (-P, its default) nor leaves the file
# system (-xdev), so nothing outside the trees changes hands.
service_user_files() {
	find "$prefix$conf_dir/." "$prefix$data_dir/." -xdev \( -user "$of_uid" -o -group "$of_gid" \) "$@"
}
handback=false
if [ -n "$of_uid" ] && [ -n "$(service_user_files -print | sed -n 1p)" ]; then
	handback=true
fi

# The workers get a system user of their own: nginx leaves its workers
# dumpable, so every process of their uid can read their memory, the keys
# of the sites they serve included, and www-data and nobody are shared
# (PHP-FPM and Apache run as www-data).
worker_user=openflare-www
worker_comment='openflare-agent nginx workers'

# nologin_shell: the first no-login shell the install root has.
nologin_shell() {
	for nl in /usr/sbin/nologin /sbin/nologin; do
		if [ -x "$prefix$nl" ]; then
			printf '%s\n' "$nl"
			return 0
		fi
	done
	printf '/bin/false\n'
}

# free_system_id: the highest id from 999 down to 100 that is neither a
# uid nor a gid yet, so that the user and its group share the number.
free_system_id() {
	awk -F: '{ used[$3] = 1 } END { for (id = 999; id >= 100; id--) if (!(id in used)) { print id; exit } }' "$prefix/etc/passwd" "$prefix/etc/group"
}

# append_entry FILE LINE: LINE at the end of FILE, on a line of its own
# even when FILE lacks a final newline. Appending keeps the file's owner
# and mode, which a rewritten shadow file would lose.
append_entry() {
	if [ -s "$1" ] && [ -n "$(tail -c 1 "$1")" ]; then printf '\n' >>"$1"; fi
	printf '%s\n' "$2" >>"$1"
}

# is_busybox TOOL: TOOL is BusyBox's applet (Debian's adduser takes other
# options).
is_busybox() {
	command -v "$1" >/dev/null 2>&1 || return 1
	help=$("$1" --help 2>&1) || true
	case $help in *BusyBox*) return 0 ;; esac
	return 1
}

# add_worker_user: create the workers' user, and its group unless that
# exists, with no login shell and no home. On the running system useradd
# and groupadd do it where they exist (they lock the files and keep shadow
# and gshadow in step), BusyBox's adduser and addgroup where those do.
# Under --root, and on an OpenWrt whose BusyBox has neither, the entries
# are written into the install root's files: tools of the host would
# change the host's.
add_worker_user() {
	shell=$(nologin_shell)
	gid=$(group_id "$worker_user")
	if [ -z "$prefix" ] && command -v useradd >/dev/null 2>&1 && command -v groupadd >/dev/null 2>&1; then
		[ -n "$gid" ] || groupadd --system "$worker_user" || return 1
		useradd --system --gid "$worker_user" --no-create-home --home-dir /nonexistent --shell "$shell" --comment "$worker_comment" "$worker_user"
		return
	fi
	if [ -z "$prefix" ] && is_busybox adduser && is_busybox addgroup; then
		[ -n "$gid" ] || addgroup -S "$worker_user" || return 1
		adduser -S -D -H -h /nonexistent -s "$shell" -G "$worker_user" -g "$worker_comment" "$worker_user"
		return
	fi
	if [ -z "$gid" ]; then
		gid=$(free_system_id)
		[ -n "$gid" ] || return 1
		append_entry "$prefix/etc/group" "$worker_user:x:$gid:" || return 1
		if [ -f "$prefix/etc/gshadow" ]; then append_entry "$prefix/etc/gshadow" "$worker_user:!::" || return 1; fi
	fi
	uid=$gid
	if [ -n "$(awk -F: -v id="$uid" '$3 == id { print; exit }' "$prefix/etc/passwd")" ]; then
		uid=$(free_system_id)
		[ -n "$uid" ] || return 1
	fi
	# Locked: "!" where there is no shadow file, else the shadow entry's.
	if [ -f "$prefix/etc/shadow" ]; then
		append_entry "$prefix/etc/shadow" "$worker_user:!:::::::" || return 1
		append_entry "$prefix/etc/passwd" "$worker_user:x:$uid:$gid:$worker_comment:/nonexistent:$shell"
	else
		append_entry "$prefix/etc/passwd" "$worker_user:!:$uid:$gid:$worker_comment:/nonexistent:$shell"
	fi
}

# nginx_user is pinned on a new install and when the workers change user
# anyway (the hand-back): otherwise, with nothing set, the control plane's
# template could choose them by its `user` line, any existing account but
# root (the stock template names openflare, which an upgraded node keeps).
# An existing value is the owner's and stays; so does what a running root
# node resolves to, since its temp and cache files belong to that user.
# That is also why the workers' user is only created to be pinned: the
# agent prefers it, so on a node that pins nothing it would move the
# workers away from their files.
nginx_user=$(json_str nginx_user)
if [ -n "$nginx_user" ]; then
	if [ -z "$service_user" ]; then
		case ${nginx_user%%[: ]*} in
		www-data | nobody) say "note: nginx_user is $nginx_user, a user other services may share: their processes can read the workers' memory, the sites' private keys included; docs/workers.md says how to give the workers a user of their own" ;;
		esac
	fi
elif [ -z "$service_user" ] && { [ ! -f "$prefix$conf" ] || $handback; }; then
	# An install root without account files (an image being built) gets
	# none from here: the agent picks the workers' user at start.
	if [ -f "$prefix/etc/passwd" ] && [ -f "$prefix/etc/group" ] && [ -z "$(passwd_field "$worker_user" 3)" ]; then
		{ add_worker_user && [ -n "$(passwd_field "$worker_user" 3)" ]; } || die "cannot create the system user $worker_user for nginx's workers: create it (no login shell, no home) or set nginx_user in $conf, and re-run"
		say "created the system user $worker_user (uid $(passwd_field "$worker_user" 3)) for nginx's workers"
	fi
	for u in "$worker_user" www-data nobody; do
		uid=$(passwd_field "$u" 3)
		case $uid in '' | 0 | *[!0-9]*) continue ;; esac
		g=$(group_name "$(passwd_field "$u" 4)")
		[ -n "$g" ] || continue
		nginx_user=$u:$g
		drop="$drop nginx_user"
		break
	done
	if [ -z "$nginx_user" ] && [ -f "$prefix/etc/passwd" ]; then
		say "note: none of $worker_user, www-data and nobody (with a group) exists, so nginx_user is not pinned: the agent picks the workers' user at start"
	elif [ -n "$nginx_user" ] && [ "${nginx_user%%:*}" != "$worker_user" ]; then
		say "note: $worker_user is root here or has no group, so nginx_user is $nginx_user, a user other services may share (docs/workers.md)"
	fi
fi

# The worker user, for the temp and cache files the old nginx left.
w_uid='' w_gid=''
if $handback; then
	wu=${nginx_user%%[: ]*}
	wg=${nginx_user#"$wu"}
	wg=${wg#[: ]}
	w_uid=$(passwd_field "$wu" 3)
	if [ -n "$wg" ]; then w_gid=$(group_id "$wg"); else w_gid=$(passwd_field "$wu" 4); fi
	case $w_uid:$w_gid in
	:* | *: | *[!0-9:]*) die "nginx_user ${nginx_user:-(none)} is no user here: set nginx_user in $conf to the workers' user (\"user\" or \"user:group\") and re-run" ;;
	esac
fi

# write_conf FILE: the new agent.json. Only printf (a shell builtin) sees
# the tokens, so they never reach a child process's command line.
write_conf() {
	sep=''
	{
		printf '{\n'
		for key in server_url agent_token discovery_token node_name openresty_path data_dir access_log_path nginx_user; do
			case " $drop " in *" $key "*) ;; *) continue ;; esac
			case $key in
			server_url) v=$server_url ;;
			agent_token) v=$agent_token ;;
			discovery_token) v=$discovery_token ;;
			node_name) v=$node_name ;;
			openresty_path) v=$openresty_path ;;
			data_dir) v=$data_dir ;;
			access_log_path) v=$access_log_path ;;
			nginx_user) v=$nginx_user ;;
			esac
			if [ "$key" = agent_token ] && [ -z "$v" ]; then
				continue
			fi
			printf '%s  "%s": "%s"' "$sep" "$key" "$(json_escape "$v")"
			sep=',
'
		done
		if [ -f "$prefix$conf" ]; then
			awk -v drop="$drop" "$json_members_awk" "$prefix$conf" >"$1.kept"
			while IFS= read -r member; do
				printf '%s  %s' "$sep" "$member"
				sep=',
'
			done <"$1.kept"
		fi
		printf '\n}\n'
	} >"$1"
}

tmp=$prefix$conf_dir/.agent.json.new
(
	umask 077
	write_conf "$tmp"
)
chmod 0600 "$tmp"
conf_changed=true
if [ -f "$prefix$conf" ] && cmp -s "$tmp" "$prefix$conf"; then
	rm -f "$tmp"
	conf_changed=false
	say "$prefix$conf unchanged ($token_note)"
else
	mv -f "$tmp" "$prefix$conf"
	say "wrote $prefix$conf ($token_note)"
fi
chmod 0600 "$prefix$conf"
unset agent_token discovery_token existing_token existing_discovery

# --- The binary: a new file renamed into place, so a running agent keeps
# its old inode. ---
dest=$prefix$bin_dir/openflare-agent
bin_changed=true
if [ -f "$dest" ] && cmp -s "$binary" "$dest"; then
	bin_changed=false
	say "$dest unchanged"
else
	cp "$binary" "$dest.new"
	chmod 0755 "$dest.new"
	mv -f "$dest.new" "$dest"
	say "installed $dest"
fi
chmod 0755 "$dest"

# The link replaces whatever is at its path in one rename: an agent
# running from a binary that earlier installs put there keeps its inode.
if [ -n "$link" ]; then
	link_path=$prefix$link
	target=$bin_dir/openflare-agent
	if [ ! -L "$link_path" ] || [ "$(readlink "$link_path")" != "$target" ]; then
		rm -f "$link_path.new"
		mkdir -p "$(dirname "$link_path")"
		ln -s "$target" "$link_path.new"
		mv -f "$link_path.new" "$link_path"
		say "linked $link_path -> $target"
	fi
fi

# --- The service. ---
# install_file SRC DEST MODE: copy unless identical; report whether changed.
install_file() {
	if [ -f "$2" ] && cmp -s "$1" "$2"; then
		chmod "$3" "$2"
		say "$2 unchanged"
		return 1
	fi
	mkdir -p "$(dirname "$2")"
	cp "$1" "$2.new"
	chmod "$3" "$2.new"
	mv -f "$2.new" "$2"
	say "installed $2"
}

svc_changed=false
if [ "$platform" = openwrt ]; then
	if install_file "$svc_src" "$prefix/etc/init.d/openflare-agent" 0755; then svc_changed=true; fi
else
	# The unit names the data directory (ReadWritePaths=); make it this one.
	unit=$prefix$conf_dir/.openflare-agent.service.new
	dd_sed=$(printf '%s' "$data_dir" | sed 's/[\\|&]/\\&/g')
	sed "s|/var/lib/openflare|$dd_sed|g" "$svc_src" >"$unit"
	if install_file "$unit" "$prefix/etc/systemd/system/openflare-agent.service" 0644; then svc_changed=true; fi
fi

# --- Ownership and modes. ---

# pids_of UID: the processes running as UID.
pids_of() {
	for d in /proc/[0-9]*; do
		awk -v u="$1" '/^Uid:/ { exit !($2 == u || $3 == u || $4 == u) }' "$d/status" 2>/dev/null && printf '%s\n' "${d#/proc/}"
	done
	return 0
}

# stop_service_user: before its files change hands, nothing may run as the
# old service user. Its nginx must go anyway: once the files are root's
# that master can read none of them, and only a root master can run the
# workers as another user. The agent goes first, so that it does not start
# nginx again; the new agent starts a root nginx from the landed config at
# once, so the sites are down for a few seconds, this one time.
stop_service_user() {
	[ -n "$(pids_of "$of_uid")" ] || return 0
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemctl stop openflare-agent || true
	fi
	sig=QUIT
	for secs in 15 5; do
		for pid in $(pids_of "$of_uid"); do
			case $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") in
			*"nginx: master process"*) kill -"$sig" "$pid" 2>/dev/null || true ;;
			esac
		done
		while [ "$secs" -gt 0 ] && [ -n "$(pids_of "$of_uid")" ]; do
			sleep 1
			secs=$((secs - 1))
		done
		# Connections that outlive a graceful quit are cut.
		sig=TERM
	done
	left=$(pids_of "$of_uid" | tr '\n' ' ')
	[ -z "$left" ] || die "processes of the user openflare still run (${left% }): stop them and re-run install.sh; the agent is stopped, its files unchanged"
	say "stopped the agent and the nginx that ran as openflare"
}

if $handback; then
	if $real_root; then stop_service_user; fi
	if [ "$(id -u)" = 0 ]; then
		# The temp and cache files the old nginx wrote go to the workers
		# (nginx gives the directories themselves to them at start, not
		# what lies below); everything else to root.
		var=$data_dir/var
		access_log=$(json_str access_log_path)
		[ -z "$access_log_path" ] || access_log=$access_log_path
		[ -z "$access_log" ] || var=$(dirname "$(dirname "$(dirname "$access_log")")")
		if in_tree "$var/cache"; then
			for d in "$prefix$var/cache"/* "$prefix$var/cache/nginx"/*; do
				[ -d "$d" ] && [ ! -L "$d" ] && [ "$d" != "$prefix$var/cache/nginx" ] || continue
				find "$d" -xdev \( -user "$of_uid" -o -group "$of_gid" \) -exec chown -h "$w_uid:$w_gid" {} +
			done
		fi
		service_user_files -exec chown -h 0:0 {} +
		say "handed $conf_dir and $data_dir back to root from the user openflare (left in place, owning nothing there); nginx workers: $nginx_user"
	else
		say "note: files in $conf_dir and $data_dir belong to the user openflare: run install.sh as root to hand them to root"
	fi
fi
if [ -n "$service_user" ]; then
	# What this run wrote must stay the agent's to rewrite.
	su_uid=$(passwd_field "$service_user" 3)
	su_gid=$(passwd_field "$service_user" 4)
	if [ -n "$su_uid" ] && [ -n "$su_gid" ] && [ "$(id -u)" = 0 ]; then
		chown "$su_uid:$su_gid" "$prefix$conf_dir" "$prefix$data_dir" "$prefix$conf"
	fi
	say "note: a drop-in runs the agent as $service_user: its files are left to it, and nginx workers share its uid and can read the node token (see docs/workers.md)"
elif [ "$(id -u)" = 0 ]; then
	chown 0:0 "$prefix$conf_dir" "$prefix$data_dir" "$prefix$conf"
fi

# The agent keeps its token, keys and state to itself, whatever an earlier
# release or umask left: agent.json 0600, the state file 0600 in a
# directory nobody else lists (its o+x stays: Pages lie below it), private
# keys 0600. Only inside the agent's trees, never through a symlink.
chmod 0600 "$prefix$conf"
state_path=$(json_str state_path)
[ -n "$state_path" ] || state_path=$data_dir/var/lib/openflare/agent-state.json
state_dir=$(dirname "$state_path")
if in_tree "$state_dir"; then
	chmod go-rw "$prefix$state_dir"
	if [ -f "$prefix$state_path" ] && [ ! -L "$prefix$state_path" ]; then chmod go-rwx "$prefix$state_path"; fi
fi
cert_dir=$(json_str cert_dir)
[ -n "$cert_dir" ] || cert_dir=$data_dir/etc/nginx/certs
if in_tree "$cert_dir"; then
	find "$prefix$cert_dir/." -xdev -type f -name '*.key' ! -perm 600 -exec chmod 0600 {} +
fi

# --- Starting the service (a real install only). ---
if $real_root && [ "$platform" = systemd ]; then
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		was_active=false
		if systemctl is-active --quiet openflare-agent; then was_active=true; fi
		systemctl daemon-reload
		systemctl enable --now openflare-agent
		if $was_active && { $bin_changed || $conf_changed || $svc_changed; }; then
			# KillMode=process: nginx keeps serving while the agent restarts.
			systemctl restart openflare-agent
		fi
		say "openflare-agent enabled and running: journalctl -u openflare-agent -f"
	else
		say "systemd is not running here: once it is, systemctl enable --now openflare-agent"
	fi
elif $real_root; then
	/etc/init.d/openflare-agent enable
	if $bin_changed || $conf_changed || $svc_changed; then
		/etc/init.d/openflare-agent restart
	else
		# procd leaves an unchanged running instance alone.
		/etc/init.d/openflare-agent start
	fi
	say "openflare-agent enabled and running: logread -e openflare-agent -f"
else
	say "installed under $root: nothing enabled or started"
fi
