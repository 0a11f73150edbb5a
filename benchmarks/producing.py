"""The confluent-kafka produce loops of the workloads that drive a broker: flat out (the
most a producer gets through) and paced by the clock (latency at an offered rate).

Both take producers the caller made (``confluent_kafka.Producer``), so each workload
keeps its own configuration, and both raise, naming ``system``, when a message was not
delivered: a benchmark of lost messages is no benchmark.
"""

import functools
import time


def produce_flat_out(producer, topic, value, count, *, system, warm_up=({},), timeout=120):
    """Hand ``count`` messages of ``value`` to ``producer`` as fast as it takes them
    (calling poll() only while its queue is full), wait for every delivery report and
    return the seconds taken.

    ``warm_up`` holds the produce() keyword arguments of messages sent and delivered
    before the clock starts (one per partition opens a connection to every leader; the
    first message to a new topic creates it), so that the figure is the steady state."""
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)
    for kwargs in warm_up:
        producer.produce(topic, value, callback=report, **kwargs)
    producer.flush(60)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, callback=report)
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(timeout)
    seconds = time.perf_counter() - started
    _check(system, errors, left)
    return seconds


def produce_paced(producers, topic, value, rate, seconds, *, system, timeout=120):
    """Offer ``rate`` messages/s of ``value`` for ``seconds``, round robin over
    ``producers``; return the sorted latencies (seconds) and how long the offer took.

    A message's latency runs from its scheduled send to its delivery report. The loop is
    paced by the clock, and a message sent late because the loop fell behind is charged
    the delay, so a stalled broker cannot hide behind a stalled producer. The producers
    should have sent a message already (connections and metadata before the clock)."""
    latencies, errors = [], []

    def report(late, err, msg):
        if err is not None:
            errors.append(err)
        else:
            # librdkafka measures produce() to acknowledgement; add how late produce() was.
            latencies.append(late + (msg.latency() or 0.0))
    total = int(rate * seconds)
    sent = 0
    started = time.perf_counter()
    while sent < total:
        due = min(total, int((time.perf_counter() - started) * rate) + 1)
        while sent < due:
            late = time.perf_counter() - (started + sent / rate)
            try:
                producers[sent % len(producers)].produce(
                    topic, value, callback=functools.partial(report, max(0.0, late)))
            except BufferError:
                break
            sent += 1
        # Serve delivery reports often (a report waits in librdkafka until poll()), and
        # wait in the last poll() for the next message's time, at most 1 ms.
        for p in producers[:-1]:
            p.poll(0)
        producers[-1].poll(min(0.001, max(0.0, started + sent / rate - time.perf_counter())))
    offered_for = time.perf_counter() - started
    left = sum(p.flush(timeout) for p in producers)
    _check(system, errors, left)
    latencies.sort()
    return latencies, offered_for


def _check(system, errors, undelivered):
    if errors or undelivered:
        raise RuntimeError(f"{system}: {len(errors)} delivery errors ({errors[:3]}), "
                           f"{undelivered} undelivered")
