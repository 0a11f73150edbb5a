/* Group commit's rendezvous (kqlite/storage/group_commit.py has the theory).
 *
 * Why in C: with eight threads appending durably, each fsync round ends by waking
 * every waiter. Python's threading.Condition wakes them one Python-level lock at
 * a time and each woken thread needs the GIL just to go back to sleep if the round
 * did not cover it; here the waiting, the hand-over of the lead and the leader's
 * gathering happen on a pthread mutex and conditions with the GIL released (cffi
 * releases it around every call). Only the leader returns to Python, to run the
 * round itself; a waiter returns once per round that ended while it waited.
 *
 * The struct is opaque to Python; one is made per Log and freed with it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "kqlite_native.h"

struct kq_rounds {
    pthread_mutex_t lock;
    pthread_cond_t ended;       /* a round ended: its waiters re-check their offsets */
    pthread_cond_t gather;      /* the leader waits here for writers and joiners */
    int leading;
    int gathering;
    int writers;                /* threads between the start of a syncing append and its write */
    int waiting;                /* threads waiting for the running round to end */
    int last_size;              /* threads the last round covered, its leader included */
    uint64_t rounds_ended;
};

kq_rounds *kq_rounds_new(void)
{
    kq_rounds *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    /* The gathering deadline must not jump with the wall clock. */
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&r->lock, NULL) != 0
            || pthread_cond_init(&r->ended, NULL) != 0
            || pthread_cond_init(&r->gather, &attr) != 0) {
        pthread_condattr_destroy(&attr);
        free(r);
        return NULL;
    }
    pthread_condattr_destroy(&attr);
    r->last_size = 1;
    return r;
}

void kq_rounds_free(kq_rounds *r)
{
    if (r == NULL)
        return;
    pthread_cond_destroy(&r->gather);
    pthread_cond_destroy(&r->ended);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void kq_rounds_writing(kq_rounds *r, int delta)
{
    pthread_mutex_lock(&r->lock);
    r->writers += delta;
    if (r->gathering && r->writers == 0)
        pthread_cond_signal(&r->gather);
    pthread_mutex_unlock(&r->lock);
}

static int gathered(const kq_rounds *r)
{
    return r->writers == 0 && r->waiting + 1 >= r->last_size;
}

int kq_rounds_enter(kq_rounds *r, int64_t gather_ns)
{
    pthread_mutex_lock(&r->lock);
    if (r->leading) {
        uint64_t seen = r->rounds_ended;
        r->waiting++;
        if (r->gathering)
            pthread_cond_signal(&r->gather);    /* one more joiner: the leader may start */
        while (r->rounds_ended == seen)
            pthread_cond_wait(&r->ended, &r->lock);
        r->waiting--;
        pthread_mutex_unlock(&r->lock);
        return KQ_ROUND_ENDED;
    }
    r->leading = 1;
    if (!gathered(r) && gather_ns > 0) {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += gather_ns / 1000000000;
        deadline.tv_nsec += gather_ns % 1000000000;
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
        r->gathering = 1;
        while (!gathered(r)) {
            if (pthread_cond_timedwait(&r->gather, &r->lock, &deadline) == ETIMEDOUT)
                break;
        }
        r->gathering = 0;
    }
    r->last_size = r->waiting + 1;
    pthread_mutex_unlock(&r->lock);
    return KQ_ROUND_LEAD;
}

void kq_rounds_leave(kq_rounds *r)
{
    pthread_mutex_lock(&r->lock);
    r->leading = 0;
    r->rounds_ended++;
    if (r->waiting)
        pthread_cond_broadcast(&r->ended);
    pthread_mutex_unlock(&r->lock);
}
