#!/bin/busybox sh
# The guest side of `cargo xtask kernels`: runs as init in a busybox initramfs, traces the
# project's workloads and runs the integration-test binaries, and prints what it found as
# "KT..." lines on the console, which xtask reads. The kernel command line's kt= says what
# this boot checks (full, kernel, preempt or floor) or that it measures (bench); /etc/kt.conf gives
# THREADS and ROUNDS (of lock_mix) and TESTS (test binaries in /tests, each NAME:FILTERS:SKIPS:
# a test runs if its name holds any filter, none: every test, unless it holds a skip; each list
# separated by commas), and KERNEL_TESTS, those of them whose outcome depends on the kernel.
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# /tmp and /run stay in the initramfs, itself writable memory: a tmpfs mounted there would
# hide the files copied to their build paths (a checkout under /tmp).
. /etc/kt.conf
BOOT=$(sed -n 's/.* kt=\([a-z]*\).*/\1/p' /proc/cmdline)
# How long one test binary may run before it is taken for hung: the slowest takes about 200 s
# on an emulated arm64 kernel; in a full boot, records runs for every C library, about 410 s
# on 6.12's x86-64 kernel and 1.5-1.8 times that on 6.1's.
case $BOOT in
    full) TEST_LIMIT_S=1500 ;;
    *) TEST_LIMIT_S=600 ;;
esac
failed=0
say() { echo "KT: $*"; }
fail() { echo "KT-FAIL: $*"; failed=1; }
show() { sed "s/^/KT|$1| /" "$2"; }
uptime_cs() { tr -d . < /proc/uptime | cut -d' ' -f1; }

say "kernel $(uname -r), $(nproc) CPUs, command line: $(cat /proc/cmdline)"

# Every worker of lock_mix (a file whose thread is not the process) made exactly 2*ROUNDS
# lock entries, lock returns and unlocks, in that cycle, and nothing else; THREADS of them.
check_mix() { # $1: label, $2: directory
    workers=0
    for f in "$2"/tr.*; do
        [ -f "$f" ] || continue
        awk -F: 'NR == 1 { exit ($3 == $4) ? 0 : 1 }' "$f" && continue
        workers=$((workers + 1))
        verdict=$(awk -F: -v n=$((2 * ROUNDS)) '
            NF != 13 { bad = "a line of " NF " fields"; exit }
            { k = $6 ":" $7 ":" $8; want = (NR % 3 == 1) ? "2:2:1" : (NR % 3 == 2) ? "2:2:2" : "2:4:0"
              if (k != want) { bad = "line " NR " is " k ", not " want; exit } }
            END { if (bad != "") print bad; else if (NR != 3 * n) print NR " lines, not " 3 * n; else print "exact" }' "$f")
        [ "$verdict" = exact ] || fail "$1: $(basename "$f"): $verdict"
    done
    [ $workers = "$THREADS" ] || fail "$1: $workers worker files, not $THREADS"
}

# No program of the tracer's is left once it has exited. Perf-event probes (before 6.10) are
# closed by a child the tracer leaves for that, one kernel grace period each, serially: after
# tests that trace many processes that takes minutes under emulation. Allow 5 minutes; say how
# long it took when it was not at once.
check_detached() { # $1: label
    for waited in $(seq 0 600); do
        if [ "$(/bpf_programs)" = 0 ]; then
            [ "$waited" = 0 ] || say "$1: the tracer's BPF programs were gone $((waited / 2)) s after it exited"
            return 0
        fi
        sleep 0.5
    done
    fail "$1: $(/bpf_programs) BPF programs of the tracer still loaded 300 s after it exited"
}

# A run that has not ended in 300 s: what every thread of the tracer and of the workload is
# doing, so that a hang says where it is instead of ending the boot silently.
report_hung() { # $1: label
    fail "$1: the tracer had not exited after 300 s; its threads and the workload's:"
    for p in /proc/[0-9]*; do
        comm=$(cat $p/comm 2>/dev/null)
        case "$comm" in thrtrace-bpf|lock_mix) ;; *) continue ;; esac
        for t in $p/task/*; do
            echo "KT|hung| ${p#/proc/}/${t##*/} $(cat $t/comm 2>/dev/null)" \
                "$(grep -E '^(State|SigPnd|ShdPnd|SigBlk)' $t/status 2>/dev/null | tr -s '\t\n' '  ')" \
                "wchan=$(cat $t/wchan 2>/dev/null)"
            sed 's/^/KT|hung|     /' $t/stack 2>/dev/null
        done
    done
}

trace_mix() { # $1: label, $2: each CPU's ring in KiB, rest: tracer options
    label=$1; ring=$2; shift 2
    rm -rf /tmp/t && mkdir /tmp/t
    thrtrace-bpf "$@" -e mutex --buffer-kib "$ring" -d /tmp/t -- /lock_mix $THREADS $ROUNDS \
        > /tmp/out 2> /tmp/err &
    tracer=$!
    waited=0
    while [ -d /proc/$tracer ] && ! grep -q '^State:.*zombie' /proc/$tracer/status; do
        if [ $waited = 600 ]; then
            show "$label" /tmp/err
            report_hung "$label"
            kill -9 $tracer; killall -9 lock_mix 2>/dev/null
            break
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    wait $tracer
    rc=$?
    show "$label" /tmp/out; show "$label" /tmp/err
    [ $rc = 0 ] || fail "$label: tracer exit status $rc"
    grep -q ' 0 lost' /tmp/err || fail "$label: records were lost"
    check_mix "$label" /tmp/t
    check_detached "$label"
}

# A ring of 16 KiB fills many times over: --lossless stops the workload instead, and nothing
# is lost.
check_lossless() { # $1: label
    trace_mix "$1" 16 --lossless
    grep -q -- '--lossless stopped traced threads' /tmp/err \
        || fail "$1: the ring never filled, so nothing was checked"
}

# A kernel below the floor: one line that names what it lacks and the floor, exit status 2,
# no file written, nothing left loaded.
refused_below_floor() {
    rm -rf /tmp/t && mkdir /tmp/t
    thrtrace-bpf -e mutex -d /tmp/t -- /lock_mix 1 1 > /tmp/out 2> /tmp/err
    rc=$?
    show floor /tmp/err
    [ $rc = 2 ] || fail "below the floor: exit status $rc, not 2"
    [ "$(wc -l < /tmp/err)" = 1 ] || fail "below the floor: $(wc -l < /tmp/err) lines, not 1"
    grep -q 'lacks .*(Linux [0-9.]*).*needs Linux 5.19 or later' /tmp/err \
        || fail "below the floor: the line names no missing feature or floor"
    [ -z "$(ls /tmp/t)" ] || fail "below the floor: files were written: $(ls /tmp/t)"
    check_detached floor
}

# `cargo xtask bench --guest` (kt=bench): xtask's runs, in its order, each one's output shown
# for it to read. /etc/bench.probes: a mode and a command a line, run with the pid of a process
# of /etc/bench.target appended (probe listings); /etc/bench.runs: a repetition, a mode and a
# command a line.
run_bench() {
    $(cat /etc/bench.target) > /dev/null &
    target=$!
    # Listed once its loader has mapped the C library, not before.
    for _ in $(seq 0 100); do
        grep -q 'libc[.-]' /proc/$target/maps && break
        sleep 0.1
    done
    while read -r mode cmd; do
        $cmd $target > /tmp/out 2>&1 || fail "bench: $cmd $target: exit status $?"
        show "probes|$mode" /tmp/out
    done < /etc/bench.probes
    kill $target
    while read -r rep mode cmd; do
        rm -rf /tmp/b && mkdir /tmp/b
        $cmd > /tmp/out 2> /tmp/err || fail "bench: $cmd: exit status $?"
        show "bench|$rep|$mode|out" /tmp/out
        show "bench|$rep|$mode|err" /tmp/err
    done < /etc/bench.runs
}

if [ "$BOOT" = bench ]; then
    run_bench
elif [ "$BOOT" = floor ]; then
    refused_below_floor
elif [ "$BOOT" = preempt ]; then
    trace_mix preempt 32768
    # Where programs are preempted most: a record still being written holds a ring's reader
    # back, and a stop signal can be overtaken.
    check_lossless preempt-lossless
else
    # A boot of what depends on the kernel: the tests whose outcome does, built against the
    # architecture's own C library only (the others' runs do not depend on the kernel).
    if [ "$BOOT" = kernel ]; then
        export THRTRACE_TEST_LIBCS=own
        TESTS=$KERNEL_TESTS
    fi
    trace_mix mix 32768 -v
    check_lossless lossless
    # Start and exit with every category, the tracer's whole run around a trivial command.
    rm -rf /tmp/s && mkdir /tmp/s
    start=$(uptime_cs)
    thrtrace-bpf -d /tmp/s -- /lock_mix 1 1 > /dev/null 2> /tmp/err || fail "all categories: $(cat /tmp/err)"
    say "TIMING start+exit with every category: $(( ($(uptime_cs) - start) * 10 )) ms"
    check_detached "all categories"
    for run in $TESTS; do
        t=${run%%:*}; rest=${run#*:}
        filters=$(echo "${rest%%:*}" | tr , ' '); skips=$(echo "${rest#*:}" | tr , ' ')
        # Some skips name tests this architecture's build leaves out; xtask's unit tests check
        # that each names a test of the binary's source.
        skip_args=""
        for skip in $skips; do skip_args="$skip_args --skip $skip"; done
        mkdir -p /tmp/tests && cd /tmp/tests
        started=$(uptime_cs)
        # A test that waits forever is killed with its binary, whose output then says which
        # test it was in (one thread: each test's name is printed as it starts); the others run.
        CI=true THRTRACE_BIN=/usr/local/bin/thrtrace-bpf timeout -s KILL $TEST_LIMIT_S \
            /tests/$t --test-threads=1 $filters $skip_args > /tmp/test.out 2>&1
        rc=$?
        [ $rc = 137 ] && echo "killed after $TEST_LIMIT_S s" >> /tmp/test.out \
            && killall -q -KILL thrtrace-bpf
        took="$(( ($(uptime_cs) - started) / 100 )) s"
        cd /
        summary=$(grep '^test result' /tmp/test.out | tail -1)
        # A renamed test, or one left out of this architecture's build, checks nothing: each
        # filter must have started a test (one that failed makes the status non-zero), not an
        # ignored one. The outcome may come after a workload's own lines, on another line.
        unmatched=""
        for filter in $filters; do
            grep "^test [^ ]*$filter[^ ]* \.\.\. " /tmp/test.out | grep -qv 'ignored$' \
                || unmatched="$unmatched $filter"
        done
        if [ $rc != 0 ]; then
            show "$t" /tmp/test.out
            fail "TEST $t: exit status $rc: $summary ($took)"
        elif echo "$summary" | grep -q ' 0 passed;'; then
            fail "TEST $t: no test ran (filters '$filters'): $summary"
        elif [ -n "$unmatched" ]; then
            fail "TEST $t: no test ran for filter(s)$unmatched: $summary"
        else
            say "TEST $t: $summary ($took)"
        fi
        check_detached "$t"
    done
fi
dmesg | grep -i -E 'bpf|uprobe' | tail -10 | sed 's/^/KT|dmesg| /'
[ $failed = 0 ] && say "RESULT PASS" || say "RESULT FAIL"
sync
poweroff -f
