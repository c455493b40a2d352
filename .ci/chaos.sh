#!/usr/bin/env bash
# The safety campaign's runs (docs/SAFETY.md), as `make test` and `make chaos`
# start them: per backend, a fenced run then a control run on the same seed.
# A fenced run with violations, or a control run without any, fails. The
# control run's violations are expected, so only their count by kind is
# printed, and the last lines say what passed.
#
# Usage: .ci/chaos.sh FENCED_DURATION CONTROL_DURATION [fencechaos flags...]
# Environment: CHAOS_BACKENDS (default "postgres redis postgres:pgwire redis:resp": each
# a backend, with :PROTOCOL for fencechaos --protocol, else its default
# grpc+http, and @SOURCE for --source, the election the workers campaign
# in, else etcd: e.g. redis@redis-lease), CHAOS_SEED (default: a new seed per run, printed).
set -euo pipefail

fenced=$1 control=$2
shift 2

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# field NAME LINE prints the number NAME=<n> in a fencechaos result line.
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2"; }

summary=()
for b in ${CHAOS_BACKENDS:-postgres redis postgres:pgwire redis:resp}; do
	seed=${CHAOS_SEED:-$(($(date +%s%N) / 1000 % 1000000000 + 1))}
	spec=${b%%@*}
	run=(--backend="${spec%%:*}")
	[[ $spec == *:* ]] && run+=(--protocol="${spec#*:}")
	[[ $b == *@* ]] && run+=(--source="${b#*@}")
	bin/fencechaos "${run[@]}" --mode=fenced --duration="$fenced" --seed="$seed" "$@" | tee "$logs/fenced"
	if ! bin/fencechaos "${run[@]}" --mode=control --duration="$control" --seed="$seed" --print-violations=0 "$@" | tee "$logs/control"; then
		# A control run shows the campaign can catch a violation; a short
		# one may end without any when its timing gave no reckless zombie a
		# newer leader's write to land after (seen twice in a row on an
		# idle machine, 2026-11-29: 3106 and 3825 zombie writes stored,
		# every one before the next leader's first). Two more seeds get a
		# chance each; a third miss fails.
		for next in $((seed + 1)) $((seed + 2)); do
			[[ $(field violations "$(grep '^fencechaos backend=' "$logs/control" | tail -n1)") == 0 ]] || exit 1
			echo "chaos: the control run found no violation; once more with seed $next"
			if bin/fencechaos "${run[@]}" --mode=control --duration="$control" --seed="$next" --print-violations=0 "$@" | tee "$logs/control"; then
				break
			fi
			[[ $next == $((seed + 2)) ]] && exit 1
		done
	fi
	f=$(grep '^fencechaos backend=' "$logs/fenced" | tail -n1)
	c=$(grep '^fencechaos backend=' "$logs/control" | tail -n1)
	p=$(sed -n 's/.* protocol=\([^ ]*\).*/\1/p' <<<"$f")
	s=$(sed -n 's/.* source=\([^ ]*\).*/\1/p' <<<"$f")
	summary+=("chaos $b (protocol $p, source $s, seed $seed): fenced $(field violations "$f") violations in $(field ops "$f") writes, $(field zombie_writes_attempted "$f") of them by zombies, $(field hostile_accepted "$f") of $(field hostile_attempts "$f") attacks accepted; control $(field violations "$c") violations, as it must")
done
echo
printf '%s\n' "${summary[@]}"
