/* The sampler's tick for file counter sources: pread, parse, stamp and store N ports.
 *
 * collector/sources/files.py calls read_ports() once per tick with the ring record the
 * tick goes to. For every port whose two descriptors are open and whose next status is
 * OK it does what PairedFileReader.read_into does in Python: a CLOCK_MONOTONIC read
 * before and after the port's two preads (the sample time is their midpoint, the read
 * duration their difference), both values parsed as decimal integers and multiplied into
 * bytes, all stored in the record. Anything else -- a closed descriptor, a first reading
 * after a (re)open, a failed read, text that is not a plain unsigned decimal, a value whose
 * bytes would not fit 63 bits -- is left to Python: the port is flagged in `pending` and
 * the Python path reads it again and decides (status, backoff, reopen), so every fault
 * rule lives in one place.
 *
 * No allocation, no Python object per port: one call, one pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define READ_BYTES 32
#define STATUS_OK 0

static inline int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A plain decimal as sysfs prints it: optional blanks, digits, optional blanks (the
 * newline). Returns 0 on anything int() might read differently (signs, underscores,
 * more than 19 digits, nothing at all): Python decides those. */
static inline int parse_decimal(const char *text, ssize_t length, uint64_t *value) {
    ssize_t i = 0;
    while (i < length && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r'))) i++;
    ssize_t first = i;
    uint64_t v = 0;
    while (i < length && text[i] >= '0' && text[i] <= '9') {
        if (i - first >= 19) return 0;
        v = v * 10 + (uint64_t)(text[i] - '0');
        i++;
    }
    if (i == first) return 0;
    while (i < length && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r'))) i++;
    if (i != length) return 0;
    *value = v;
    return 1;
}

/* Every port into the record at `base`; returns how many are left to Python (flagged). */
static Py_ssize_t fill_record(char *base, Py_ssize_t ports, const int32_t *xfd,
                              const int32_t *rfd, const int64_t *scale, const uint8_t *next,
                              uint8_t *flag) {
    int64_t *timestamp = (int64_t *)(base + 8);
    uint64_t *xmit = (uint64_t *)(base + 8 + 8 * ports);
    uint64_t *rcv = (uint64_t *)(base + 8 + 16 * ports);
    int64_t *read_ns = (int64_t *)(base + 8 + 24 * ports);
    uint8_t *status = (uint8_t *)(base + 8 + 32 * ports);
    Py_ssize_t waiting = 0;
    char text[READ_BYTES + 1];
    for (Py_ssize_t p = 0; p < ports; p++) {
        flag[p] = 1;
        if (xfd[p] < 0 || rfd[p] < 0 || next[p] != STATUS_OK || scale[p] <= 0) {
            waiting++;
            continue;
        }
        int64_t before = now_ns();
        uint64_t x = 0, r = 0;
        ssize_t n = pread(xfd[p], text, READ_BYTES, 0);
        int ok = n > 0 && parse_decimal(text, n, &x);
        if (ok) {
            n = pread(rfd[p], text, READ_BYTES, 0);
            ok = n > 0 && parse_decimal(text, n, &r);
        }
        int64_t after = now_ns();
        uint64_t limit = (uint64_t)INT64_MAX / (uint64_t)scale[p];
        if (!ok || x > limit || r > limit) {
            waiting++;
            continue;
        }
        timestamp[p] = (before + after) >> 1;
        xmit[p] = x * (uint64_t)scale[p];
        rcv[p] = r * (uint64_t)scale[p];
        read_ns[p] = after - before;
        status[p] = STATUS_OK;
        flag[p] = 0;
    }
    return waiting;
}

/* The ring's head: the one word that orders its rows (collector/ring.py gives the whole
 * argument). The writer fills row h, then publishes h + 1 with a release store (C11
 * 5.1.2.4p11: it synchronizes with a reader's load-acquire that reads it, so every store of
 * the row happens before that reader's copy), then a release fence, so the stores of the
 * next row, which overwrite row h + 1 - capacity, are not seen ahead of this head (C11
 * 7.17.4p2: the fence synchronizes with the acquire fence in ring_recheck_head of any reader
 * whose copy saw one of them). GCC and Clang emit STLR, LDAR, DMB ISH and DMB ISHLD for these
 * on AArch64 and plain moves on x86-64 (https://www.cl.cam.ac.uk/~pes20/cpp/cpp0xmappings.html). */
static inline void publish(int64_t *head, int64_t value) {
    __atomic_store_n(head, value, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

/* The header word `index` of the ring in `object`, or NULL with an exception set. The view
 * is released at once: the caller holds the ring (its mapping outlives the call). */
static int64_t *header_word(PyObject *object, PyObject *index_object) {
    Py_ssize_t index = PyNumber_AsSsize_t(index_object, PyExc_IndexError);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(object, &view, PyBUF_WRITABLE) < 0) return NULL;
    char *base = (char *)view.buf;
    Py_ssize_t length = view.len;
    PyBuffer_Release(&view);
    if (index < 0 || index >= 64 || length < 8 * 64 || (uintptr_t)base % 8) {
        PyErr_SetString(PyExc_ValueError, "not a word of an aligned 64-word ring header");
        return NULL;
    }
    return (int64_t *)base + index;
}

/* ring_publish_head(buffer, index, value): the writer's commit of every row before `value`. */
static PyObject *ring_publish_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "ring_publish_head(buffer, index, value)");
        return NULL;
    }
    long long value = PyLong_AsLongLong(args[2]);
    if (value == -1 && PyErr_Occurred()) return NULL;
    int64_t *head = header_word(args[0], args[1]);
    if (head == NULL) return NULL;
    publish(head, (int64_t)value);
    Py_RETURN_NONE;
}

/* ring_acquire_head(buffer, index) -> int: a reader's first look at the head (load-acquire):
 * every row below it is complete in this thread's view. */
static PyObject *ring_acquire_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ring_acquire_head(buffer, index)");
        return NULL;
    }
    int64_t *head = header_word(args[0], args[1]);
    if (head == NULL) return NULL;
    return PyLong_FromLongLong(__atomic_load_n(head, __ATOMIC_ACQUIRE));
}

/* ring_recheck_head(buffer, index) -> int: after a reader's copy, an acquire fence (no load
 * of the copy moves after it) then the head: any row the copy may have caught being
 * overwritten lies below this head minus the capacity. */
static PyObject *ring_recheck_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ring_recheck_head(buffer, index)");
        return NULL;
    }
    int64_t *head = header_word(args[0], args[1]);
    if (head == NULL) return NULL;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return PyLong_FromLongLong(__atomic_load_n(head, __ATOMIC_RELAXED));
}

static int writable(PyObject *object, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(object, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a writable contiguous buffer", what);
        return 0;
    }
    return 1;
}

/* The six buffers both entry points take (the ring, then five per-port arrays), each at least
 * need[i] bytes. Returns how many views it holds (the caller releases them); 6 on success,
 * fewer with an exception set. */
static int acquire_six(PyObject *objects[6], Py_buffer *views[6], const Py_ssize_t need[6]) {
    static const char *names[6] = {"buffer", "xmit_fds", "rcv_fds", "scales", "next_status",
                                   "pending"};
    for (int got = 0; got < 6; got++) {
        if (!writable(objects[got], views[got], names[got])) return got;
        if (views[got]->len < need[got]) {
            PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", names[got],
                         views[got]->len, need[got]);
            return got + 1;
        }
    }
    return 6;
}

/* read_ports(buffer, offset, ports, xmit_fds, rcv_fds, scales, next_status, pending) -> int
 *
 * buffer, offset: a writable buffer (the ring's shared memory) and where in it the tick's
 *   record starts, 8-byte aligned. A record is int64 lateness (left alone here), then int64
 *   timestamp_ns[ports], uint64 xmit_bytes[ports], uint64 rcv_bytes[ports], int64
 *   read_ns[ports], uint8 status[ports] (collector/ring.py's layout).
 * xmit_fds, rcv_fds: int32 per port (-1: closed); scales: int64 bytes per unit per port;
 * next_status: uint8 per port; pending: uint8 per port, set to 1 where Python must read.
 * Returns how many ports are pending.
 */
static PyObject *read_ports(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[6];
    Py_ssize_t offset, ports;
    if (!PyArg_ParseTuple(args, "OnnOOOOO", &objects[0], &offset, &ports, &objects[1],
                          &objects[2], &objects[3], &objects[4], &objects[5]))
        return NULL;
    if (offset < 0 || ports < 0 || offset % 8) {
        PyErr_SetString(PyExc_ValueError, "offset must be 8-byte aligned; ports >= 0");
        return NULL;
    }
    Py_buffer record, xmit_fds, rcv_fds, scales, next_status, pending;
    Py_buffer *views[6] = {&record, &xmit_fds, &rcv_fds, &scales, &next_status, &pending};
    Py_ssize_t need[6] = {offset + 8 + ports * 33, ports * 4, ports * 4, ports * 8, ports, ports};
    PyObject *result = NULL;
    int got = acquire_six(objects, views, need);
    if (got < 6) goto done;
    result = PyLong_FromSsize_t(fill_record(
        (char *)record.buf + offset, ports, (const int32_t *)xmit_fds.buf,
        (const int32_t *)rcv_fds.buf, (const int64_t *)scales.buf,
        (const uint8_t *)next_status.buf, (uint8_t *)pending.buf));
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(views[i]);
    return result;
}

/* run_ticks(buffer, records, capacity, record_bytes, header, ports, xmit_fds, rcv_fds, scales,
 *           next_status, pending, interval_ns, spin_ns, deadline, ticks, missed, parent)
 *   -> (reason, deadline, ticks, missed, woke, offset)
 *
 * collector/sampler.py's run_loop, tick after tick, for as long as every port is settled
 * here: the same absolute deadlines, lateness, heartbeat and missed-tick rule (a deadline
 * closer than half an interval after a tick's reads is skipped and counted), the same
 * header words (`header`: the indexes of HEAD, TICKS, MISSED_TICKS, STOP_REQUESTED,
 * HEARTBEAT_NS as a tuple), so the Python loop and this one are interchangeable tick by
 * tick. It returns to Python:
 *   reason 0: STOP_REQUESTED was set (by the SIGTERM handler, which runs here: at once
 *             when a signal interrupts the sleep, else before the next tick; or by the
 *             parent);
 *   reason 1: a tick with ports left to Python (`pending`): the record at `offset` is
 *             filled but for those and not yet committed; `woke` is its wake-up time.
 *             Python reads them, commits the tick and does its bookkeeping;
 *   reason 2: the parent process is gone (checked every 1024 ticks, as in Python).
 * The GIL is released while sleeping.
 */
static PyObject *run_ticks(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[6];
    Py_ssize_t records, capacity, record_bytes, ports;
    Py_ssize_t head_i, ticks_i, missed_i, stop_i, heartbeat_i;
    long long interval, spin, deadline, ticks, missed;
    long parent;
    if (!PyArg_ParseTuple(args, "Onnn(nnnnn)nOOOOOLLLLLl", &objects[0], &records, &capacity,
                          &record_bytes, &head_i, &ticks_i, &missed_i, &stop_i, &heartbeat_i,
                          &ports, &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &interval, &spin, &deadline, &ticks, &missed, &parent))
        return NULL;
    if (capacity <= 0 || interval <= 0 || records % 8 || record_bytes % 8 ||
        record_bytes < 8 + 33 * ports) {
        PyErr_SetString(PyExc_ValueError, "bad ring geometry or interval");
        return NULL;
    }
    Py_buffer ring, xmit_fds, rcv_fds, scales, next_status, pending;
    Py_buffer *views[6] = {&ring, &xmit_fds, &rcv_fds, &scales, &next_status, &pending};
    Py_ssize_t need[6] = {records + capacity * record_bytes, ports * 4, ports * 4, ports * 8,
                          ports, ports};
    PyObject *result = NULL;
    int got = acquire_six(objects, views, need);
    if (got < 6) goto done;
    if (records < 8 * 64 || head_i < 0 || ticks_i < 0 || missed_i < 0 || stop_i < 0 ||
        heartbeat_i < 0 || head_i >= 64 || ticks_i >= 64 || missed_i >= 64 || stop_i >= 64 ||
        heartbeat_i >= 64) {
        PyErr_SetString(PyExc_ValueError, "header indexes outside the 64-word header");
        goto done;
    }
    {
        char *base = (char *)ring.buf;
        int64_t *header = (int64_t *)base;
        const int32_t *xfd = (const int32_t *)xmit_fds.buf, *rfd = (const int32_t *)rcv_fds.buf;
        const int64_t *scale = (const int64_t *)scales.buf;
        const uint8_t *next = (const uint8_t *)next_status.buf;
        uint8_t *flag = (uint8_t *)pending.buf;
        int reason = 0;
        int64_t woke = 0, offset = 0;
        for (;;) {
            /* A signal that came while this loop read or spun, not slept, only set CPython's
             * flag: nothing here returns EINTR for it, so its handler (the SIGTERM one sets
             * STOP_REQUESTED) runs here or never. An atomic load when none is pending. */
            if (PyErr_CheckSignals() < 0) goto done;
            if (__atomic_load_n(&header[stop_i], __ATOMIC_RELAXED)) break;
            int64_t wait_until = deadline - spin;
            if (now_ns() < wait_until) {
                struct timespec at = {wait_until / 1000000000LL, wait_until % 1000000000LL};
                int slept;
                Py_BEGIN_ALLOW_THREADS
                slept = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
                Py_END_ALLOW_THREADS
                if (slept == EINTR) continue; /* a signal: its handler runs at the top */
            }
            if (spin)
                while (now_ns() < deadline) {
                }
            woke = now_ns();
            int64_t head = __atomic_load_n(&header[head_i], __ATOMIC_RELAXED); /* ours */
            offset = records + (head % capacity) * record_bytes;
            if (fill_record(base + offset, ports, xfd, rfd, scale, next, flag)) {
                reason = 1;
                break;
            }
            *(int64_t *)(base + offset) = woke - deadline; /* lateness */
            publish(&header[head_i], head + 1);
            ticks++;
            header[ticks_i] = ticks;
            header[heartbeat_i] = woke;
            deadline += interval;
            /* No deadline closer than half an interval after this tick's reads ended. */
            int64_t earliest = now_ns() + interval / 2;
            if (deadline < earliest) {
                int64_t skipped = (earliest - deadline + interval - 1) / interval;
                missed += skipped;
                deadline += skipped * interval;
                header[missed_i] = missed;
            }
            if ((ticks & 1023) == 0 && getppid() != parent) {
                reason = 2;
                break;
            }
        }
        result = Py_BuildValue("(iLLLLL)", reason, (long long)deadline, (long long)ticks,
                               (long long)missed, (long long)woke, (long long)offset);
    }
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"read_ports", read_ports, METH_VARARGS,
     "read_ports(buffer, offset, ports, xmit_fds, rcv_fds, scales, next_status, pending)"
     " -> int\n"
     "Read every healthy port into one ring record; flag the rest for Python."},
    {"run_ticks", run_ticks, METH_VARARGS,
     "run_ticks(buffer, records, capacity, record_bytes, header, ports, xmit_fds, rcv_fds,"
     " scales, next_status, pending, interval_ns, spin_ns, deadline, ticks, missed, parent)"
     " -> (reason, deadline, ticks, missed, woke, offset)\n"
     "The sampler loop, in C, until a stop, a tick with ports for Python, or an orphan."},
    {"ring_publish_head", (PyCFunction)(void (*)(void))ring_publish_head, METH_FASTCALL,
     "ring_publish_head(buffer, index, value)\n"
     "Writer: store header word `index` with release, then a release fence."},
    {"ring_acquire_head", (PyCFunction)(void (*)(void))ring_acquire_head, METH_FASTCALL,
     "ring_acquire_head(buffer, index) -> int\nReader: load header word `index` with acquire."},
    {"ring_recheck_head", (PyCFunction)(void (*)(void))ring_recheck_head, METH_FASTCALL,
     "ring_recheck_head(buffer, index) -> int\n"
     "Reader, after copying: an acquire fence, then header word `index`."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "burstscope.collector.sources._tick",
    "The sampler's tick for file counter sources, in C (see collector/sources/files.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tick(void) { return PyModule_Create(&module); }
