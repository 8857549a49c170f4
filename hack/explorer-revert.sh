#!/usr/bin/env bash
# Runs the protocol explorer on a copy of this tree with the fix for one
# finding of the 2026-12-01 safety review (or one the explorer found: a write
# admitted again after its client gave up) reverted, and checks that it finds
# a counterexample (docs/reliability.md, "Protocol explorer").
#
#   hack/explorer-revert.sh f1|f2|f4|f-readmit|hb-lagged|hb-live [go test flags...]
#
# The patch (test/explorer/testdata/revert/<finding>.patch) undoes the fix in
# the shipped code; the explorer test that passes on this tree must fail on
# the copy with a printed trace. EXPLORER_BOUND passes through (default: the
# bound make test runs). Exits 0 when the counterexample was found, 1 when the
# explorer found none (the revert went unnoticed), 2 on bad usage or a patch
# that no longer applies. The tree itself is never changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  echo "usage: $0 f1|f2|f4|f-readmit|hb-lagged|hb-live [go test flags...]" >&2
  echo "  f1: finding 1 (status.holderUser test in HolderRequestIndex, requeued-holder refusal)" >&2
  echo "  f2: finding 2 (the fencing webhook's AnswerBy refusal)" >&2
  echo "  f4: finding 4 (fence.Writes.Begin takes the token and counts the write in one step)" >&2
  echo "  f-readmit: the explorer's (a release after a write without an answer keeps the request: fence.Writes.Quiesce)" >&2
  echo "  hb-lagged: heartbeats (the grant waits C if the heartbeat moved between the looks around the removal: heartbeatLagged)" >&2
  echo "  hb-live: heartbeats (the heartbeat read live before a heartbeat tenure's request is removed: expireHeartbeat)" >&2
  exit 2
}

[ $# -ge 1 ] || usage
finding="$1"; shift
case "$finding" in
  f1) test='^TestNobodyInheritsATenureByQueueingUnderItsIdentity$' ;;
  f2) test='^TestShortLeaseWritesBeforeTheCutOffCommitBeforeTheNextGrant$' ;;
  f4) test='^TestReleaseWaitsForEveryWriteOfTheTenure$' ;;
  f-readmit) test='^TestAWriteAdmittedAgainAfterItsClientGaveUpCommitsBeforeTheGrant$' ;;
  hb-lagged|hb-live) test='^TestHeartbeatRenewalsKeepTheInvariants$' ;;
  *) echo "unknown finding \"$finding\": expected f1, f2, f4, f-readmit, hb-lagged or hb-live" >&2; usage ;;
esac
patch="$ROOT/test/explorer/testdata/revert/$finding.patch"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The tree as it is (tracked files and new ones not ignored), without ./bin.
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^bin$' | tar --null -T - -cf -) | tar -xf - -C "$tmp"
if ! (cd "$tmp" && git apply "$patch"); then
  echo "$patch does not apply to this tree any more: update it (it must undo only finding ${finding#f}'s fix)" >&2
  exit 2
fi
echo "reverted: $(grep -c '^+++ ' "$patch") file(s) from $patch; running $test" >&2

out="$tmp/out"
set +e
(cd "$tmp" && go test ./test/explorer/ -run "$test" -count=1 -v "$@") 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ] && grep -q 'counterexample to ' "$out"; then
  echo "$finding reverted: the explorer found a counterexample (above)" >&2
  exit 0
fi
echo "$finding reverted: the explorer found NO counterexample (go test exit $rc)" >&2
exit 1
