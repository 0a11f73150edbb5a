"""Fetch sessions (KIP-227): a fetcher names its partitions once, then sends only changes.

Theory of operation, as Kafka's FetchSession.scala (3.9): a Fetch carries a session id
and an epoch. Epoch 0 (INITIAL) asks for a *full* fetch: every partition is named, and
the broker answers them all and, if its cache has room, creates a session whose id it
returns (epoch 1 is then expected next). Epoch -1 (FINAL) is a full fetch that wants no
session (every Fetch below v7 is one). Any other epoch is *incremental*: the request
names only the partitions added or changed and ``forgotten`` ones to drop; the broker
reads every partition of the session, and answers only those with something new
(records, a moved high watermark or log start, an error). A partition that returned
records moves to the end of the session, so the next fetches start with the others. A
full request naming an existing session closes it first.

Refusals, answered in the response's top-level error with no partitions:
FETCH_SESSION_ID_NOT_FOUND (no such session: evicted, or a restarted broker),
INVALID_FETCH_SESSION_EPOCH (not the epoch the session expects: a duplicate or a
concurrent request), FETCH_SESSION_TOPIC_ID_ERROR (a session made by topic id used by
name, or the reverse).

The cache is bounded (``max.incremental.fetch.session.cache.slots``, 1000). When it is
full, a new session takes the place of the least recently used one if that one has been
idle for over two minutes, else of the "least valuable" one old enough to be evictable
(unprivileged before privileged -- followers are privileged --, smaller before larger),
and only if the newcomer is at least as valuable; otherwise the fetch is answered
without a session (session id 0). Kafka shards this cache 8 ways for lock contention;
the event loop needs no locks, so this is one shard with all the slots.

Pure: no I/O, no clock (callers pass ``now_ms``), randomness injectable. Partition keys
and request data are the caller's opaque values; results passed to :meth:`respond` need
``error_code``, ``high_watermark``, ``log_start_offset`` and ``size`` (record bytes).
"""

import random as _random

from ..protocol import ErrorCode

__all__ = ["FetchSessionCache", "FetchSession", "FetchContext", "SessionResponse",
           "next_epoch", "INVALID_SESSION_ID", "INITIAL_EPOCH", "FINAL_EPOCH",
           "DEFAULT_CACHE_SLOTS", "EVICTION_MS"]

# WIRE: Kafka's FetchMetadata constants.
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_ID = 0x7FFFFFFF
_MAX_EPOCH = 0x7FFFFFFF

DEFAULT_CACHE_SLOTS = 1000     # Kafka's max.incremental.fetch.session.cache.slots
EVICTION_MS = 120_000          # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS


def next_epoch(epoch):
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch): FINAL stays FINAL, the
    largest int32 wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


class _Cached:
    """One partition of a session: the fetcher's last request data and what the broker
    last told it."""
    __slots__ = ("request", "high_watermark", "log_start_offset")

    def __init__(self, request, high_watermark=-1, log_start_offset=-1):
        self.request = request
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset


class FetchSession:
    """A cached session. ``partitions``: key -> _Cached, in the order they are read."""

    def __init__(self, session_id, privileged, partitions, uses_topic_ids, now_ms):
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        # Snapshots taken at each touch, as Kafka's evictable maps are.
        self.cached_size = -1
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    def evictable_key(self):
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data, forgotten):
        """Fold an incremental request in: new partitions go last, named ones get the new
        request data in place, forgotten ones leave."""
        for key, request in fetch_data.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = _Cached(request)
            else:
                cached.request = request
        for key in forgotten:
            self.partitions.pop(key, None)

    def __repr__(self):
        return (f"FetchSession(id={self.id}, epoch={self.epoch}, "
                f"partitions={len(self.partitions)}, privileged={self.privileged})")


class SessionResponse:
    """What a context answers: the top-level ``error_code`` and ``session_id``, the
    ``partitions`` to send ``[(key, result)]`` and the ``omitted`` ones (unchanged in an
    incremental session; the caller releases their results)."""
    __slots__ = ("error_code", "session_id", "partitions", "omitted")

    def __init__(self, error_code, session_id, partitions, omitted=()):
        self.error_code = error_code
        self.session_id = session_id
        self.partitions = partitions
        self.omitted = list(omitted)


class FetchContext:
    """How one Fetch is served: :meth:`partitions` says what to read, :meth:`respond`
    turns the results into the response (and updates the session)."""
    kind = "sessionless"
    error_code = ErrorCode.NONE

    def __init__(self, fetch_data=None):
        self._fetch_data = fetch_data or {}

    def partitions(self):
        """``[(key, request data)]`` to read, in order."""
        return list(self._fetch_data.items())

    def respond(self, results, now_ms):
        """``results``: ``[(key, result)]`` for :meth:`partitions`. Returns SessionResponse."""
        return SessionResponse(ErrorCode.NONE, INVALID_SESSION_ID, list(results))

    def throttled(self):
        """The answer to a fetch a client quota throttles: no partitions, and no session
        made or changed (Kafka's ``getThrottledResponse``)."""
        return SessionResponse(self.error_code, INVALID_SESSION_ID, [])


class _SessionError(FetchContext):
    kind = "error"

    def __init__(self, error_code):
        super().__init__()
        self.error_code = error_code

    def respond(self, results, now_ms):
        return SessionResponse(self.error_code, INVALID_SESSION_ID, [], results)


class _Full(FetchContext):
    kind = "full"

    def __init__(self, cache, fetch_data, uses_topic_ids, privileged):
        super().__init__(fetch_data)
        self._cache = cache
        self._uses_topic_ids = uses_topic_ids
        self._privileged = privileged

    def respond(self, results, now_ms):
        results = list(results)

        def cached_partitions():
            return {key: _Cached(self._fetch_data[key], r.high_watermark, r.log_start_offset)
                    for key, r in results}
        session_id = self._cache._maybe_create(now_ms, self._privileged, len(results),
                                               self._uses_topic_ids, cached_partitions)
        return SessionResponse(ErrorCode.NONE, session_id, results)


class _Incremental(FetchContext):
    kind = "incremental"

    def __init__(self, session, request_epoch):
        super().__init__()
        self.session = session
        self._request_epoch = request_epoch

    def partitions(self):
        return [(key, cached.request) for key, cached in self.session.partitions.items()]

    def respond(self, results, now_ms):
        session = self.session
        if session.epoch != next_epoch(self._request_epoch):
            # Another request of this session got in between: this one is stale.
            return SessionResponse(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, [],
                                   results)
        sent, omitted, moved = [], [], []
        for key, result in results:
            cached = session.partitions.get(key)
            if cached is None or _must_respond(cached, result):
                sent.append((key, result))
                if cached is not None and result.size > 0:
                    moved.append(key)
            else:
                omitted.append((key, result))
        for key in moved:       # served: to the back of the queue
            session.partitions[key] = session.partitions.pop(key)
        return SessionResponse(ErrorCode.NONE, session.id, sent, omitted)

    def throttled(self):
        # The session keeps its partitions as they were; the epoch check still applies.
        code = ErrorCode.NONE if self.session.epoch == next_epoch(self._request_epoch) \
            else ErrorCode.INVALID_FETCH_SESSION_EPOCH
        return SessionResponse(code, self.session.id, [])


def _must_respond(cached, result):
    """Kafka's CachedPartition.maybeUpdateResponseData, updating the cache."""
    must = result.size > 0
    if cached.high_watermark != result.high_watermark:
        must = True
        cached.high_watermark = result.high_watermark
    if cached.log_start_offset != result.log_start_offset:
        must = True
        cached.log_start_offset = result.log_start_offset
    if result.error_code != ErrorCode.NONE:
        cached.high_watermark = -1
        must = True
    if result.diverging_epoch is not None:
        must = True     # a follower must hear it to truncate, bytes or not
    return must


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCache and FetchManager)."""

    def __init__(self, max_slots=DEFAULT_CACHE_SLOTS, eviction_ms=EVICTION_MS, *,
                 rng=None):
        if not isinstance(max_slots, int) or max_slots < 0:
            raise ValueError(f"max.incremental.fetch.session.cache.slots must be a "
                             f"non-negative integer, not {max_slots!r}")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.evictions = 0
        self._rng = rng or _random.Random()
        self._sessions = {}

    def __len__(self):
        return len(self._sessions)

    def get(self, session_id):
        return self._sessions.get(session_id)

    def sessions(self):
        return list(self._sessions.values())

    def total_partitions(self):
        return sum(max(s.cached_size, 0) for s in self._sessions.values())

    def new_context(self, *, version, session_id, epoch, from_follower, fetch_data,
                    forgotten, now_ms):
        """The context of a Fetch (Kafka's FetchManager.newContext). ``fetch_data``: an
        insertion-ordered dict key -> request data (duplicates already collapsed);
        ``forgotten``: keys to drop from an incremental session."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._remove(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(fetch_data)
            return _Full(self, fetch_data, version >= 13, from_follower)
        session = self._sessions.get(session_id)
        if session is None:
            return _SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return _SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (version >= 13):
            return _SessionError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, forgotten)
        if not session.partitions:
            self._remove(session_id)
            return FetchContext(fetch_data)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return _Incremental(session, epoch)

    # -- The cache (Kafka's FetchSessionCacheShard) -----------------------------------------

    def _maybe_create(self, now_ms, privileged, size, uses_topic_ids, make_partitions):
        if len(self._sessions) >= self.max_slots and \
                not self._try_evict(privileged, (privileged, size, 0), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, make_partitions(),
                               uses_topic_ids, now_ms)
        self._sessions[session.id] = session
        self._touch(session, now_ms)
        return session.id

    def _new_id(self):
        while True:
            session_id = self._rng.randrange(1, _MAX_ID)
            if session_id not in self._sessions:
                return session_id

    def _try_evict(self, privileged, key, now_ms):
        if not self._sessions:
            return False
        lru = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self._evict(lru)
            return True
        flag = "evictable_by_privileged" if privileged else "evictable_by_all"
        candidates = [s for s in self._sessions.values() if getattr(s, flag)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session):
        self._remove(session.id)
        self.evictions += 1

    def _remove(self, session_id):
        return self._sessions.pop(session_id, None)

    def _touch(self, session, now_ms):
        session.last_used_ms = now_ms
        session.cached_size = len(session.partitions)
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old_enough
        session.evictable_by_all = old_enough
