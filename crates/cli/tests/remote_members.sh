#!/usr/bin/env bash
# Arrays across hosts (issue 21): six members that are qemu-nbd exports, each in its own network
# namespace behind a veth on one bridge (one link with netem delay), so member traffic crosses an
# interface. create, serve, write; kill one member's server mid-write (the array goes on
# degraded, reads stay right); a second serve from another namespace is refused by the owner
# record; a fresh export comes up and `replace` rebuilds onto it; the result reads right with
# another member's server gone.
#
# Run by crates/cli/tests/remote_members.rs with SG=path/to/stripeguard. Needs root, ip, tc,
# qemu-nbd, qemu-img: without them it prints why and exits 0 (skipped).
set -euo pipefail
SG=${SG:?set SG to the stripeguard binary}
skip() { echo "skipping: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
for t in ip tc qemu-nbd qemu-img cmp; do command -v $t >/dev/null || skip "$t is not installed"; done
tag="sg$$"
ip netns add "$tag-probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$tag-probe"

dir=$(mktemp -d)
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for i in 0 1 2 3 4 5 c; do ip netns del "$tag-$i" 2>/dev/null; done
  ip link del "$tag-br" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
trap "exit 130" INT TERM
# A subnet of its own, so two runs at once (or a stale one) do not meet.
net="10.$((100 + $$ % 100)).$(( ($$ / 100) % 250 ))"

ip link add "$tag-br" type bridge
ip addr add $net.1/24 dev "$tag-br"
ip link set "$tag-br" up
host() { # name last-octet
  ip netns add "$tag-$1"
  ip link add "$tag-v$1" type veth peer name eth0 netns "$tag-$1"
  ip link set "$tag-v$1" master "$tag-br" up
  ip -n "$tag-$1" addr add "$net.$2/24" dev eth0
  ip -n "$tag-$1" link set eth0 up
  ip -n "$tag-$1" link set lo up
}
for i in 0 1 2 3 4 5; do host $i $((10 + i)); done
host c 100
# One slow link to member 0: 2 ms of delay where the kernel has netem, else a 100 Mbit/s
# token bucket (this machine's kernel has tbf but no netem).
if ! tc qdisc add dev "$tag-v0" root netem delay 2ms 2>/dev/null; then
  echo "note: no netem in this kernel; member 0's link is limited to 100 Mbit/s with tbf instead"
  tc qdisc add dev "$tag-v0" root tbf rate 100mbit burst 64kb latency 50ms
fi

export_member() { # index file
  ip netns exec "$tag-$1" qemu-nbd -t --shared=8 -f raw -b "$net.$((10 + $1))" -p 10809 "$2" &
  pids+=($!)
  eval "qpid$1=$!"
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/$net.$((10 + $1))/10809) 2>/dev/null && return 0
    sleep 0.05
  done
  echo "qemu-nbd for member $1 did not come up"; exit 1
}
uris=()
for i in 0 1 2 3 4 5; do
  truncate -s 40M "$dir/e$i"
  export_member $i "$dir/e$i"
  uris+=("nbd://$net.$((10 + i)):10809/")
done
export STRIPEGUARD_NBD_TIMEOUT=3

"$SG" create "${uris[@]}" --scheme hybrid-seq --chunk 64K
cap=$("$SG" status "${uris[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["capacity_bytes"])')
echo "capacity $cap"
head -c $((96 << 20)) /dev/urandom > "$dir/image"

"$SG" serve "${uris[@]}" --socket "$dir/sg.sock" 2> "$dir/serve.err" & spid=$!
pids+=($spid)
for _ in $(seq 600); do [ -S "$dir/sg.sock" ] && break; sleep 0.05; done
[ -S "$dir/sg.sock" ] || { echo "FAIL: the server did not listen within 30 s"; cat "$dir/serve.err"; exit 1; }
sock="nbd+unix:///?socket=$dir/sg.sock"

# A second serve from another namespace (another "host" on the network) on the same members.
if ip netns exec "$tag-c" timeout 60 "$SG" serve "${uris[@]}" --listen 127.0.0.1:10999 --quiet 2> "$dir/second.err"; then
  echo "FAIL: a second serve on the same members was not refused"; exit 1
fi
grep -q "in use" "$dir/second.err" || { echo "FAIL: the refusal does not say why:"; cat "$dir/second.err"; exit 1; }
echo "second serve refused: $(head -c 200 "$dir/second.err")"

# Write the image through the server; kill member 3's server in the middle.
qemu-img convert -n -f raw -O raw "$dir/image" "$sock" & wpid=$!
sleep 0.4
kill -9 "$qpid3"
wait "$wpid" || { echo "FAIL: the write did not survive a member's server dying"; exit 1; }
qemu-img convert -f raw -O raw "$sock" "$dir/back"
cmp -n $((96 << 20)) "$dir/image" "$dir/back" || { echo "FAIL: wrong bytes after a member died"; exit 1; }
"$SG" status "${uris[@]}" > "$dir/status" || true  # exit 1: a member is out
cat "$dir/status"
grep -q "serving:" "$dir/status" || { echo "FAIL: status shows no live counters"; exit 1; }
kill -TERM "$spid"; rc=0; wait "$spid" || rc=$?
# 1 = stopped cleanly, something was found (the member that died).
[ "$rc" -le 1 ] || { echo "FAIL: the server did not stop cleanly (exit $rc):"; cat "$dir/serve.err"; exit 1; }

# A fresh export comes up in member 3's place; replace rebuilds onto it.
rm -f "$dir/e3"; truncate -s 40M "$dir/e3"
export_member 3 "$dir/e3"
"$SG" replace "${uris[@]}" --member 3 --with "${uris[3]}"
# Every byte right with member 0's server gone too (the rebuilt member carries its share).
kill -9 "$qpid0"
"$SG" read "${uris[@]}" --length $((96 << 20)) --output "$dir/back2"
cmp "$dir/image" "$dir/back2" || { echo "FAIL: wrong bytes after the replace"; exit 1; }
echo "remote members: ok"
