"""Every default of DeltaGuard, in one place: the CLI and every config class read these."""

from __future__ import annotations

# Where the gateway listens: loopback only unless told otherwise.
HOST = "127.0.0.1"
PORT = 8400

# A request (`bounds.RequestLimits`): its size in bytes (an HTTP body or a WebSocket frame);
# how deep its JSON containers nest (a body holds items, parts and tool schemas a few levels
# down) and how many values it holds in all (what a walk over it costs, whatever its size
# in bytes), both checked before any item is parsed or scored; each item's size, how many
# items it holds, and the length of the ids it names.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_JSON_DEPTH = 64
MAX_JSON_VALUES = 500_000
MAX_ITEM_BYTES = 4 * 1024 * 1024
MAX_ITEMS_PER_REQUEST = 10_000
MAX_ID_LENGTH = 256

# Conversation store (per lane and tenant): LRU + TTL bounds.
MAX_RESPONSES = 100_000
MAX_SNAPSHOTS = 50_000
STATE_TTL_S = 3600.0
# ...and in bytes: response records (their histories) and snapshots, each.
STATE_MAX_BYTES = 256 * 1024 * 1024
# Where conversation state lives: memory://, sqlite:///PATH or redis://HOST:PORT/DB.
STATE_URL = "memory://"
# With a sqlite or redis backend, the process drops what it holds of a conversation left
# unused this long (the backend keeps it): idle conversations cost no memory.
STATE_CACHE_TTL_S = 60.0

# Lanes and sinks.
INFERENCE_THREADS = 2
# The background lanes (monitor, post-inference) run on threads of their own, this much
# lower in OS priority than the request path (0: the same), so that they use what CPU the
# request path leaves.
BACKGROUND_THREADS = 2
BACKGROUND_NICE = 10
# Request bodies larger than this are parsed on the request path's pool, not the event loop.
PARSE_INLINE_BYTES = 64 * 1024
# Seconds a client refused for an overload (429 tenant_overloaded, 503 server_overloaded)
# is told to wait before it retries (`Retry-After`): a response slot frees within about that.
OVERLOAD_RETRY_AFTER_S = 1
# The garbage collector's thresholds while serving (`gc.set_threshold`; Python's are
# (700, 10, 10)): full collections, whose pause grows with the state held (~250 ms with
# the soak's stores full), at most once per four million objects kept (2,000 x 10 x 200),
# minutes apart under load instead of seconds; the young collections in between small,
# each a pause every request in flight waits out (deltaguard.gateway.process.prepare_heap).
GC_THRESHOLDS = (2_000, 10, 200)
# The interpreter's switch interval while serving (`sys.setswitchinterval`; Python's is
# 5 ms): how long the event loop may wait for the GIL that a thread scoring a large
# request holds, after each of its socket calls (deltaguard.gateway.process.shorten_gil_turns).
GIL_SWITCH_S = 0.001
# Bytes the parsed-item caches of the chat and guard APIs (and the LiteLLM hook) keep for
# resent histories, besides their entry counts (deltaguard.chat_items.ItemCache).
ITEM_CACHE_BYTES = 64 << 20
# Seconds between two trims of glibc's heaps while serving (0: never), which hand back
# what large requests' C buffers freed (deltaguard.gateway.process.start_heap_trimming).
HEAP_TRIM_S = 10.0
# glibc heap arenas `deltaguard serve` allows (MALLOC_ARENA_MAX in the environment wins).
MALLOC_ARENAS = 2
# Blocks at least this large are mapped on their own and handed back when freed (glibc's
# first threshold, which it would otherwise raise as large blocks are freed; the
# environment's MALLOC_MMAP_THRESHOLD_ wins): deltaguard.gateway.process.fix_mmap_threshold.
MALLOC_MMAP_THRESHOLD = 128 * 1024
LANE_QUEUE_SIZE = 1024  # monitor and post-inference jobs
# Monitor-lane jobs already queued when the lane takes one are folded with it, up to this
# many (the detector scores them in shared onnxruntime calls); the lane never waits for
# a batch to fill.
MONITOR_BATCH = 32
SINK_QUEUE_SIZE = 10_000  # flag and billing events
DRAIN_TIMEOUT_S = 10.0  # shutdown: lanes and sinks drain within this, the rest is spooled
# A turn waits this long for the monitor verdicts still pending on its conversation (on
# any replica of a shared state backend) before it reads the flags they raise; past it,
# the turn proceeds without them ("proceed", logged and counted) or is refused with a
# retryable 503 ("refuse"). 0: never waits.
MONITOR_VERDICT_WAIT_S = 0.0
MONITOR_VERDICT_LATE = "proceed"
# A streaming answer's output count is journalled (with a billing journal) once this many
# tokens have streamed since the last write, or this long after it: a kill loses at most
# that much of the output's billing, and a stream costs at most one append per interval
# or per that many tokens.
JOURNAL_EVERY_TOKENS = 256
JOURNAL_EVERY_S = 1.0

# Turns of one conversation blocked on their own content (injection, jailbreak, toxicity
# or one of its finer harm categories, where a policy blocks them) after which the rest of
# it is refused.
BLOCK_LIMIT = 3
# How long a lock-out lasts (repeated blocks, a near-copy of a locked history, repeated
# blocked first turns of one client), and the window in which a client's blocked first
# turns count together.
LOCK_S = 900.0
FIRST_TURN_WINDOW_S = 600.0
# Similarity sketches of locked histories kept per tenant (~1 KB each; the newest go on
# living, the oldest are dropped first): near-copies of those histories are refused too.
MAX_LOCK_SKETCHES = 256
PROBE_CATEGORIES = frozenset(
    {
        "prompt_injection",
        "jailbreak",
        "toxicity",
        *("hate", "harassment", "sexual", "violence", "self_harm", "dangerous"),  # HARM_CATEGORIES
    }
)
