#!/usr/bin/env bash
# `make test-cgroupv2`: runs ocifn's e2e tests in a guest that mounts cgroup
# v2 alone, as Kubernetes nodes do (this host is hybrid).
#
#   hack/cgroupv2/run.sh [RUN-REGEXP]
#
# Builds the guest (hack/cgroupv2/build.sh, cached in build/cgroupv2), then
# on the host the ocifn binary, the e2e test binary and the runtime image;
# boots the guest under qemu with the repository shared read-only over 9p
# (/repo: the request files and testdata/build's images) and a job
# directory under build/cgroupv2/jobs read-write (/job: the binaries,
# run.sh, the exit code), and runs the e2e tests matching RUN-REGEXP
# (default: all but those below). The serial console is the output.
# Unattended: no stdin, bounded by OCIFN_GUEST_TIMEOUT (default 7200 s).
# OCIFN_GUEST_ACCEL=kvm uses /dev/kvm where it works (TCG by default: this
# machine's nested /dev/kvm does not boot stock kernels).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin

run=${1:-.}
# Left to the host's `make test`: the tests that build with go, buildah or
# make, which only the host has (the crossplane render oracle is built with
# go, so TestRenderMatchesCrossplane stays there too, and make run's client
# is run with go run, so TestMakeRunCallsItsOwnServer does; so do
# TestInitExpectedKeepsOutputsOnFailure, TestInitStagesWhatEveryCopyNames,
# TestInitBuildsFromAnImageOfARegistry and TestInitTestRunsEveryCase, which
# run a scaffold's make with buildah, and
# TestBuildPackagesTheOtherABIsFunction, which builds its function for
# linux/386 with go); those whose --timeout (1-10 s) calls under
# TCG do not meet once several run at a time (TestFaultyFunctions,
# TestTimeout, TestMetrics, TestMisbehavingFunctionsNeverTakeTheServerDown,
# TestSoak); and TestHostNetworkOnlyWhenAsked, since the guest has no
# network interface but lo. OCIFN_GUEST_SKIP replaces the list.
skip=${OCIFN_GUEST_SKIP-'^(TestInit|TestInitExpectedKeepsOutputsOnFailure|TestInitStagesWhatEveryCopyNames|TestInitBuildsFromAnImageOfARegistry|TestInitTestRunsEveryCase|TestBuildAsUnprivilegedUser|TestBuildRefuses|TestBuildPackagesTheOtherABIsFunction|TestBuildWithRuntimeImageFromRegistry|TestGrpcurlReflection|TestRenderMatchesCrossplane|TestMakeRunCallsItsOwnServer|TestFaultyFunctions|TestTimeout|TestMetrics|TestMisbehavingFunctionsNeverTakeTheServerDown|TestSoak|TestHostNetworkOnlyWhenAsked)$'}
timeout=${OCIFN_GUEST_TIMEOUT:-7200}
accel=${OCIFN_GUEST_ACCEL:-tcg}
out=build/cgroupv2

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t0=$(now)
hack/cgroupv2/build.sh "$out"
t1=$(now)
# A job directory of its own, so that runs do not disturb each other.
mkdir -p "$out/jobs"
job=$(mktemp -d "$out/jobs/job-XXXXXX")
trap 'rm -rf "$job"' EXIT
chmod 755 "$job"
CGO_ENABLED=0 go build -trimpath -o "$job/ocifn" ./cmd/ocifn
# The guest runs the static crun the host's tests run (hack/crun.sh), not the
# Debian one in its root filesystem.
hack/crun.sh
mkdir -p "$job/bin"
cp build/crun/bin/crun "$job/bin/crun"
CGO_ENABLED=0 go test -c -o "$job/e2e.test" ./e2e/
OCIFN_BIN=$job/ocifn hack/runtime-image.sh "$job/ocifn-runtime.tar" >"$job/runtime-image.log" 2>&1 ||
	{ cat "$job/runtime-image.log" >&2; exit 1; }
cat >"$job/run.sh" <<RUN
cd /repo/e2e
export PATH=/job/bin:\$PATH
echo "guest: runtime \$(command -v crun): \$(crun --version | tr '\\n' ' ')"
export OCIFN_E2E_BIN=/job/ocifn OCIFN_E2E_PREBUILT=1 OCIFN_E2E_RUNTIME_IMAGE=/job/ocifn-runtime.tar OCIFN_E2E_CGROUPV2=1 OCIFN_E2E_TIME_SCALE=4
start=\$(cut -d' ' -f1 /proc/uptime)
/job/e2e.test -test.v -test.count=1 -test.timeout=$((timeout - 120))s -test.run '$run' -test.skip '$skip'
code=\$?
echo "guest: tests took \$(awk -v a=\$start -v b=\$(cut -d' ' -f1 /proc/uptime) 'BEGIN { printf "%.1f", b - a }')s"
exit \$code
RUN
t2=$(now)

case $accel in
kvm) accel_args=(-accel kvm -cpu host) ;;
*) accel_args=(-accel tcg,thread=multi -cpu max) ;;
esac
echo "cgroupv2: booting the guest ($accel); guest built or checked in $(secs "$t0" "$t1")s, binaries in $(secs "$t1" "$t2")s"
set +e
timeout --kill-after=10 "$timeout" qemu-system-x86_64 "${accel_args[@]}" \
	-m "${OCIFN_GUEST_MEMORY:-4096}" -smp 2 -display none -monitor none -serial stdio -no-reboot -nic none \
	-kernel "$out/vmlinuz" -initrd "$out/initrd.gz" \
	-append "console=ttyS0 quiet panic=-1 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all" \
	-drive "file=$out/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
	-virtfs "local,path=$PWD,mount_tag=repo,security_model=none,readonly=on" \
	-virtfs "local,path=$PWD/$job,mount_tag=job,security_model=none" \
	</dev/null 2>&1 | tee "$job/console.log"
qemu=${PIPESTATUS[0]}
set -e
cp "$job/console.log" "$out/console.log"
t3=$(now)
echo "cgroupv2: guest ran for $(secs "$t2" "$t3")s (qemu exit $qemu)"
if [ ! -s "$job/exit" ]; then
	echo "cgroupv2: the guest wrote no exit code (timeout after ${timeout}s, or a crash; console: $out/console.log)" >&2
	exit 1
fi
exit "$(cat "$job/exit")"
