# Experiment configuration: the scale, the emulated network, and the sweeps of the five experiments.
# Every value is checked by testbed/core/config.py before anything starts; a bad one is rejected with a
# message naming the knob and its allowed range. The values below are the defaults (testbed/core/knobs.py,
# which a setting left out of this file gets); they fit one 2-core machine.
# Regions and shards are counted from 1 wherever they appear in this file (as in the 10.55.<region>.<shard>
# container addresses).

# ---------------------------------------------------------------- scale
REGIONS = 3                 # R regions (1..64) every experiment but exp 4 uses (the first R of those deployed)
MAX_REGIONS = None          # regions deployed (containers for each, brought up once; 1..64): None = the most any
                            # experiment uses (here 10, exp 4's largest); each of REGIONS and SCALABILITY_N_REGIONS
                            # must be <= it. Regions deployed but not used by a run stay idle (sshd only)
SHARDS_PER_REGION = 2       # N shards per region (1..239; 1..63 with CONTAINERS='replica'); a container per shard
REPLICAS = 3                # replicas per shard (only 3 is supported), in the shard's container (CONTAINERS)
SCALE = 0.01                # workload table sizes x SCALE (1.0 = the original artifact's sizes), 0.0001..10
TPCC_DISTRICT = 'fixed'     # TPC-C district of a transaction: 'fixed' per coordinator (the artifact's way: with few
                            # coordinators per shard no two concurrent New-Orders share a district) or 'uniform' per
                            # transaction (TPC-C 2.4.1.2: district conflicts at any load)
ENGINE_TRANSPORT = 'tcp'    # between engine processes: 'tcp' (length-prefixed batches on plain sockets, on each
                            # process's event-loop thread) or 'grpc' (gRPC streams; about 1.4x the CPU per
                            # transaction: docs/efficiency.md)
ENGINE_DELIVERY_GRID_US = 250  # emulated delays end on a grid of this many us per engine process (0: exactly when
                            # due): what falls due around one cell end wakes the process once, each message within
                            # half a cell of its time; 250: 13 % fewer wake-ups per DAST transaction (docs/efficiency.md)
ENGINE_PROCESSES = 'container'  # 'container': one engine process runs all of a container's nodes (its shard's 3
                            # replicas, its clients, and in a region's first container the protocol's role nodes), so
                            # messages between them never leave the process; 'split': its servers in one process, its
                            # clients in another; 'node': a process per node (isolation; about 3x the CPU per
                            # transaction: docs/efficiency.md)

# ---------------------------------------------------------------- emulated network
INTRA_RTT_MS = 5            # round trip between two containers of one region (and inside one container), ms
INTER_RTT_MS = 100          # round trip between two regions, ms
RTT_OVERRIDES = {}          # per region pair, symmetric, e.g. {(1, 2): 80} (regions from 1); (r, r) sets region r's intra RTT
JITTER_MS = 0               # std-dev of the cross-region RTT, ms; each direction gets JITTER_MS/sqrt(2).
                            # Must stay <= sqrt(2) x the smallest cross-region one-way delay (else the mean is biased > 8 %)
JITTER_DISTRIBUTION = 'normal'  # netem delay distribution: normal | pareto | paretonormal (SHAPING='app' implements normal)
SHAPING = 'auto'            # auto: tc netem if the kernel has it, else the transport delays messages (says so);
                            # netem: tc netem or fail; app: the transport delays messages
NETEM_LIMIT = 100000        # packets each netem queue holds (the kernel default 1000 silently drops at ~20k pkt/s)
CONTROL_PORTS = [22, 19000]  # never delayed, source or destination: ssh from the driver, and the driver's control port

# ---------------------------------------------------------------- containers (Docker Swarm)
DEPLOYMENT = 'edge'         # names the deployment: containers <DEPLOYMENT>_r<region>_s<shard> and <DEPLOYMENT>_driver,
                            # its Docker label and its lock (one job at a time per deployment, across checkouts)
CONTAINERS = 'shard'        # 'shard': a container per shard holds its 3 replicas and its clients; 'replica': replica 0
                            # and the shard's clients (and a region's role nodes) in the shard's container as with
                            # 'shard', each follower (replica 1, 2) in a container of its own,
                            # <DEPLOYMENT>_r<region>_s<shard>_f<k> at a.b.<region>.<128 + 2 x (shard - 1) + k - 1> (so
                            # at most 63 shards per region), running in an engine process of its own: `docker kill`
                            # of a follower's container kills that follower alone (docs/nemesis.md, "Losses")
IMAGE_NAME = 'edge-txn:latest'  # image every container runs (built by docker/)
NETWORK_NAME = 'edge_txn'   # attachable overlay network
SUBNET = '10.55.0.0/16'     # overlay subnet, a.b.0.0/16 (up to /23 if fewer regions); regions use a.b.<region>.0/24
OVERLAY_MTU = 1450          # overlay MTU (underlay MTU - 50 for VXLAN), 576..9000; None = Docker's default
DRIVER_IP = '10.55.0.240'   # experiment-driver container; must lie in a.b.0.0/24, which no region uses (never delayed)
CONTAINER_CPUS = None        # CPU limit per container (docker --cpus): None = no limit (the default: a CFS quota
                            # stalls a container for the rest of its 100 ms period once used up, which shows up
                            # as latency), a number, or 'auto' = 2x its fair share of its host (>= 0.5, <= host)
SSH_CONNECT_TIMEOUT_S = 15  # seconds (1..300) to wait for each ssh:// host of hosts.yml to accept TCP, then to send its
                            # SSH banner, then to let Docker be reached over it; a silent host fails after it, not hangs

# ---------------------------------------------------------------- systems and measurement
SYSTEMS = ['dast', 'janus', 'tapir', 'slog']  # protocols compared in every figure (unbuilt ones are skipped, a
                            # misspelt one is refused; one needing more regions than a point has is skipped there:
                            # slog needs 3). An item '<protocol>+<variant>' runs the protocol with a variant's knobs
                            # as a line (and a baseline of results/claims.md) of its own, e.g. 'tapir+backoff': TAPIR
                            # retrying its aborts as its authors' clients do (VARIANT_RETRY_BACKOFF_MS) beside 'tapir'
                            # retrying them at once; the variants: testbed/core/variants.py
N_REPEAT = 3                # runs per sweep point (the median is plotted, min-max bars); --quick runs 1
SEED = 1                    # workload seed of a point's first repeat; repeat r uses SEED + r - 1 (--seed overrides)
DURATION_S = 20             # seconds each run lasts (1..3600)
WARMUP_S = 5                # trimmed from the start of every run's measurement window
COOLDOWN_S = 2              # trimmed from the end; WARMUP_S + COOLDOWN_S < DURATION_S
TAIL_PERCENTILE = 99        # tail latency plotted, in (50, 100); 90 or 95 if the machines are shared/contended
OPEN_LOOP_RATE = None       # None: closed loop, the artifact's way (a coordinator issues its next transaction when its
                            # last one finished, so a stalled system also stalls its load). A number: open loop in every
                            # run: that many transactions per second offered, of the whole deployment or of each
                            # region (OPEN_LOOP_RATE_PER), split evenly over the client processes; Poisson arrivals,
                            # each one's latency measured from its arrival, its wait for a coordinator included (no
                            # coordinated omission; docs/workloads.md). The sweeps' coordinators per client process
                            # take the arrivals; an arrival that finds none free waits
OPEN_LOOP_RATE_PER = 'total'  # 'total': OPEN_LOOP_RATE is the deployment's; 'region': each region's (exp 4 then keeps
                            # the load per region as regions are added)
OPEN_LOOP_MAX_OUTSTANDING = 1000  # open loop: transactions running or waiting per client process (1..10000000); an
                            # arrival beyond them is shed: counted in the summary, never run
RETRY_BACKOFF_MS = 0        # how a protocol that aborts (TAPIR) retries an aborted attempt: 0, at once (the DAST
                            # artifact's way, which the paper's figures reproduce); > 0, after a randomized exponential
                            # backoff, uniform [0, min(RETRY_BACKOFF_MAX_MS, this x 2^(k-1))] after the k-th abort,
                            # as TAPIR's authors' benchmark clients do (docs/workloads.md, "Retries")
RETRY_BACKOFF_MAX_MS = 5000       # the backoff's cap (the harness's max_backoff)
VARIANT_RETRY_BACKOFF_MS = 100    # a SYSTEMS item '<protocol>+backoff' retries after a randomized exponential backoff
                            # from this many ms (> 0, at most RETRY_BACKOFF_MAX_MS, its cap), whatever RETRY_BACKOFF_MS;
                            # 100: the Basil/TAPIR harness's abort_backoff default

FAULTS = None               # a fault schedule every run carries (docs/nemesis.md), e.g.
                            # 'partition:r1@5+3; pause:follower@4+2; clock:r2+50ms; spike:r0-r1+100ms@5+3';
                            # None: none. Times in s from the start of the load; windows must end by DURATION_S
FAULTS_SEED = None          # seed of the schedule's random targets (random-region, follower, ...): None = the run's

# ---------------------------------------------------------------- sweeps of the five experiments
CONCURRENCY_LEVELS = [1, 2, 4]       # exp 1: closed-loop coordinators per client process (not per region!)
EXP1_OFFERED_RATES = []              # exp 1 by offered load instead, e.g. [50, 100, 200, 400]: each a total txn/s,
                                     # open loop (as OPEN_LOOP_RATE), the largest CONCURRENCY_LEVELS coordinators per
                                     # client process taking the arrivals; [] = by CONCURRENCY_LEVELS, closed loop
CLIENT_PROCESS_PER_SHARD = [1]       # exp 1: client processes per shard (1..16);
                                     # clients per region = CLIENT_PROCESS_PER_SHARD x SHARDS_PER_REGION x concurrency
CRT_RATIOS = [10, 50, 90]            # exp 2: % of transactions forced cross-region (0..100)
ZIPFS = [0.5, 0.7, 0.9]              # exp 3: zipf coefficient of TPC-A keys (0..1)
SCALABILITY_N_REGIONS = [3, 5, 7, 10]  # exp 4: regions used, the first k of MAX_REGIONS (slog is skipped below 3)
ROBUST_RTT_VAR = [0, 10, 20, 30]     # exp 5: cross-region jitter, 100 +- x ms RTT std-dev (same rule as JITTER_MS)
FIXED_CLIENT_PROCESS_PER_SHARD = 1   # exp 2-5 run at one fixed load: client processes per shard (1..16) x
FIXED_CONCURRENCY = 4                # closed-loop coordinators each (1..256) in exp 2, 3, 5: contended (8 clients per
                                     # region, where exp 1 shows the baselines' IRTs blocking) and below 70 % host CPU
                                     # on a 2-core VM for every protocol at 3 x 2 (docs/experiments.md); the artifact
                                     # used 15-50 on 2 cores per process
SCALABILITY_CONCURRENCY = 2          # exp 4's coordinators per client process, the same in every region at every
                                     # point: at 10 x 2 on a 2-core VM, 4 ran the host 93 % busy with TAPIR (its
                                     # retries), 2 68 % as local processes and 89 % on the local swarm (the sweep
                                     # warns; the others 64-69 %; docs/experiments.md); raise both on bigger machines

# ---------------------------------------------------------------- protocol options
PROTOCOL_OPTIONS = {                 # per protocol, its options (`txn-server --list-modes --json` lists them, with
    'dast': {                        # types, defaults and ranges; docs/protocols/<name>.md explains them)
        'defer_commutative': True,   # a piece waiting for a cross-region value that commutes with every other piece
                                     # (TPC-C's HISTORY insert) runs when the value arrives; False = the artifact's
                                     # way: the region's clocks stay below the CRT until then, and every later CRT
                                     # there waits too (docs/protocols/dast.md)
    },
}
