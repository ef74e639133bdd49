/* The agent's spans from NCCL Inspector's compact lines, without a Python object per record.
 *
 * Why by hand: the agent reads about a thousand records a second and keeps three things of
 * each (the earliest kernel start, the latest kernel stop, and whose collective it was).
 * Every JSON reader callable from Python (json, msgspec, orjson) makes Python objects for
 * each record, and making them costs more than the agent's whole budget per record; no
 * library picks a few fields out of JSON lines into arrays.
 *
 * What it takes: whole lines as the plugin's json.cc writes them (NVIDIA/nccl
 * ext-profiler/inspector/json.cc, plugins/profiler/inspector/ from 2.29.7): one object a
 * line starting at the line's start, no whitespace, strings of printable ASCII without
 * escapes, integers of at most 18 digits where a time or a count is read; members in any
 * order. Within that, a line is read as collector/collectives/nccl_inspector.py's
 * parse_span reads the decoded object: the same fields checked the same way, the same
 * times. Anything else -- a line it cannot tell is one of those (a blank line, an escape,
 * a byte past ASCII, a member twice, a field of another type, a record parse_span would
 * refuse, a line longer than the reader's cap) -- makes scan() return None, and the Python
 * readers read the lines instead and decide every skip: one set of rules, in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEPTH 64   /* nesting skipped without a look; deeper lines go to Python */
#define MAX_KINDS 256  /* distinct communicator collectives in one call; more go to Python */

typedef struct {
    const char *at;
    Py_ssize_t length;
} Slice;

/* One record's fields: those of a SpanRecord (collector/collectives/nccl_inspector.py). */
typedef struct {
    Slice hostname, version, id, name, collective;
    int has_name; /* header.comm_name present and a string (null or absent: None) */
    int64_t n_ranks, nnodes;
    int64_t start, stop; /* 0: none */
} Record;

/* Bytes a plain string may hold: printable ASCII but the quote and the backslash. The
 * newline ending every line is not one, so every loop below stops at the line's end. */
static unsigned char PLAIN[256];

static void init_plain(void) {
    for (int b = 0x20; b <= 0x7e; b++) PLAIN[b] = (b != '"' && b != '\\');
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static inline int same(Slice key, const char *text, Py_ssize_t length) {
    return key.length == length && memcmp(key.at, text, (size_t)length) == 0;
}
#define IS(key, literal) same((key), (literal), (Py_ssize_t)sizeof(literal) - 1)

/* Whether any of the 8 bytes at p is not PLAIN (a quote, a backslash, a control byte or one
 * past 0x7e), eight at a time: a record's keys and strings are most of its bytes, and a byte
 * at a time was a third of the whole read. Each test is the exact "some byte is" of the
 * usual bit tricks (a borrow or carry only ever follows a byte that is flagged anyway). */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline int eight_plain(const char *p) {
    uint64_t x;
    memcpy(&x, p, sizeof(x));
    uint64_t quote = x ^ (ONES * '"'), backslash = x ^ (ONES * '\\');
    uint64_t flagged = ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash) |
                       ((x - ONES * 0x20) & ~x) | (x + ONES) | x;
    return (flagged & HIGHS) == 0;
}

/* A string of PLAIN bytes; `end` (the line's newline) bounds the eight-byte reads. */
static inline const char *string(const char *p, const char *end, Slice *out) {
    if (*p != '"') return NULL;
    const char *start = ++p;
    while (end - p >= 8 && eight_plain(p)) p += 8;
    while (PLAIN[(unsigned char)*p]) p++;
    if (*p != '"') return NULL;
    out->at = start;
    out->length = p - start;
    return p + 1;
}

/* A JSON integer with nothing of a float after it: Python's json and msgspec give an int. */
static inline const char *integer(const char *p, int64_t *out) {
    int negative = (*p == '-');
    if (negative) p++;
    const char *first = p;
    int64_t value = 0;
    if (*p == '0') {
        p++;
    } else {
        while (is_digit(*p)) {
            if (p - first >= 18) return NULL;
            value = value * 10 + (*p - '0');
            p++;
        }
    }
    if (p == first || is_digit(*p) || *p == '.' || *p == 'e' || *p == 'E') return NULL;
    *out = negative ? -value : value;
    return p;
}

static inline const char *digits(const char *p) {
    if (!is_digit(*p)) return NULL;
    while (is_digit(*p)) p++;
    return p;
}

/* Any JSON number (RFC 8259's grammar), skipped. */
static const char *number(const char *p) {
    if (*p == '-') p++;
    if (*p == '0') {
        p++;
    } else if ((p = digits(p)) == NULL) {
        return NULL;
    }
    if (*p == '.' && (p = digits(p + 1)) == NULL) return NULL;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if ((p = digits(p)) == NULL) return NULL;
    }
    return p;
}

static inline const char *literal(const char *p, const char *end, const char *word,
                                  size_t length) {
    if ((size_t)(end - p) < length || memcmp(p, word, length) != 0) return NULL;
    return p + length;
}

static const char *skip(const char *p, const char *end, int depth);

/* The members of an object, each handed to `member`, which returns where its value ended
 * (NULL: not a line for this reader). */
typedef const char *(*Member)(const char *p, const char *end, Slice key, void *state,
                              int depth);

static const char *members(const char *p, const char *end, Member member, void *state,
                           int depth) {
    if (*p != '{' || depth > MAX_DEPTH) return NULL;
    p++;
    if (*p == '}') return p + 1;
    for (;;) {
        Slice key;
        if ((p = string(p, end, &key)) == NULL || *p != ':') return NULL;
        if ((p = member(p + 1, end, key, state, depth + 1)) == NULL) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p++;
    }
}

static const char *skip_member(const char *p, const char *end, Slice key, void *state,
                               int depth) {
    (void)key;
    (void)state;
    return skip(p, end, depth);
}

/* Any JSON value, checked and skipped. */
static const char *skip(const char *p, const char *end, int depth) {
    Slice ignored;
    switch (*p) {
        case '"':
            return string(p, end, &ignored);
        case '{':
            return members(p, end, skip_member, NULL, depth);
        case '[':
            if (depth > MAX_DEPTH) return NULL;
            p++;
            if (*p == ']') return p + 1;
            for (;;) {
                if ((p = skip(p, end, depth + 1)) == NULL) return NULL;
                if (*p == ']') return p + 1;
                if (*p != ',') return NULL;
                p++;
            }
        case 't':
            return literal(p, end, "true", 4);
        case 'f':
            return literal(p, end, "false", 5);
        case 'n':
            return literal(p, end, "null", 4);
        default:
            return number(p);
    }
}

/* Each member read here may come once: a second one goes to Python. */
typedef struct {
    Record *record;
    unsigned seen;
    const char *prefix; /* "coll" or "p2p": the perf object being read */
    Py_ssize_t prefix_length;
    int64_t own_start, own_stop, kernel_start, kernel_stop;
} State;

static inline int first_time(State *state, unsigned bit) {
    if (state->seen & bit) return 0;
    state->seen |= bit;
    return 1;
}

enum {
    ID = 1u << 0, NAME = 1u << 1, RANK = 1u << 2, N_RANKS = 1u << 3, NNODES = 1u << 4,
    HEADER = 1u << 5, VERSION = 1u << 6, HOSTNAME = 1u << 7, METADATA = 1u << 8,
    PERF = 1u << 9, COLLECTIVE = 1u << 10, TRACE = 1u << 11, OWN_START = 1u << 12,
    OWN_STOP = 1u << 13, EVENTS = 1u << 14, KERNEL_START = 1u << 15, KERNEL_STOP = 1u << 16,
};

static const char *header_member(const char *p, const char *end, Slice key, void *opaque,
                                 int depth) {
    State *state = opaque;
    Record *record = state->record;
    int64_t rank;
    if (IS(key, "id")) return first_time(state, ID) ? string(p, end, &record->id) : NULL;
    if (IS(key, "comm_name")) {
        if (!first_time(state, NAME)) return NULL;
        if (*p == 'n') return literal(p, end, "null", 4); /* None, as if absent */
        record->has_name = 1;
        return string(p, end, &record->name);
    }
    if (IS(key, "rank")) return first_time(state, RANK) ? integer(p, &rank) : NULL;
    if (IS(key, "n_ranks"))
        return first_time(state, N_RANKS) ? integer(p, &record->n_ranks) : NULL;
    if (IS(key, "nnodes")) return first_time(state, NNODES) ? integer(p, &record->nnodes) : NULL;
    return skip(p, end, depth);
}

static const char *metadata_member(const char *p, const char *end, Slice key, void *opaque,
                                   int depth) {
    State *state = opaque;
    if (IS(key, "inspector_output_format_version"))
        return first_time(state, VERSION) ? string(p, end, &state->record->version) : NULL;
    if (IS(key, "hostname"))
        return first_time(state, HOSTNAME) ? string(p, end, &state->record->hostname) : NULL;
    return skip(p, end, depth);
}

/* kernel_events[]: parse_span wants both times of every channel as integers. */
static const char *kernel_member(const char *p, const char *end, Slice key, void *opaque,
                                 int depth) {
    State *state = opaque;
    int64_t time;
    unsigned bit = IS(key, "kernel_start_ts")  ? KERNEL_START
                   : IS(key, "kernel_stop_ts") ? KERNEL_STOP
                                               : 0;
    if (!bit) return skip(p, end, depth);
    if (!first_time(state, bit) || (p = integer(p, &time)) == NULL) return NULL;
    /* The earliest start and the latest stop; 0 is an event that never came. */
    if (time && bit == KERNEL_START && (!state->kernel_start || time < state->kernel_start))
        state->kernel_start = time;
    if (time && bit == KERNEL_STOP && (!state->kernel_stop || time > state->kernel_stop))
        state->kernel_stop = time;
    return p;
}

static const char *kernel_events(const char *p, const char *end, State *state, int depth) {
    if (*p != '[') return NULL;
    p++;
    if (*p == ']') return p + 1;
    for (;;) {
        State kernel = {.record = state->record};
        kernel.kernel_start = state->kernel_start;
        kernel.kernel_stop = state->kernel_stop;
        if ((p = members(p, end, kernel_member, &kernel, depth + 1)) == NULL) return NULL;
        if (kernel.seen != (KERNEL_START | KERNEL_STOP)) return NULL;
        state->kernel_start = kernel.kernel_start;
        state->kernel_stop = kernel.kernel_stop;
        if (*p == ']') return p + 1;
        if (*p != ',') return NULL;
        p++;
    }
}

static const char *trace_member(const char *p, const char *end, Slice key, void *opaque,
                                int depth) {
    State *state = opaque;
    size_t prefix = (size_t)state->prefix_length;
    if (IS(key, "kernel_events"))
        return first_time(state, EVENTS) ? kernel_events(p, end, state, depth) : NULL;
    /* Only this perf's own start and stop count ({coll,p2p}_{start,stop}_ts). */
    if ((size_t)key.length > prefix && memcmp(key.at, state->prefix, prefix) == 0) {
        Slice rest = {key.at + prefix, key.length - (Py_ssize_t)prefix};
        if (IS(rest, "_start_ts"))
            return first_time(state, OWN_START) ? integer(p, &state->own_start) : NULL;
        if (IS(rest, "_stop_ts"))
            return first_time(state, OWN_STOP) ? integer(p, &state->own_stop) : NULL;
    }
    return skip(p, end, depth);
}

static const char *perf_member(const char *p, const char *end, Slice key, void *opaque,
                               int depth) {
    State *state = opaque;
    Record *record = state->record;
    if (same(key, state->prefix, state->prefix_length))
        return first_time(state, COLLECTIVE) ? string(p, end, &record->collective) : NULL;
    if (!IS(key, "event_trace_ts")) return skip(p, end, depth);
    if (!first_time(state, TRACE)) return NULL;
    if (*p == 'n') return literal(p, end, "null", 4); /* no times: a plain record */
    State trace = {.record = record, .prefix = state->prefix, .prefix_length = state->prefix_length};
    if ((p = members(p, end, trace_member, &trace, depth)) == NULL) return NULL;
    if (trace.seen != (EVENTS | OWN_START | OWN_STOP)) return NULL;
    record->start = trace.kernel_start ? trace.kernel_start : trace.own_start;
    record->stop = trace.kernel_stop ? trace.kernel_stop : trace.own_stop;
    return p;
}

static const char *top_member(const char *p, const char *end, Slice key, void *opaque,
                              int depth) {
    State *state = opaque;
    Record *record = state->record;
    if (IS(key, "header")) {
        State header = {.record = record};
        if (!first_time(state, HEADER)) return NULL;
        p = members(p, end, header_member, &header, depth);
        return (header.seen & (ID | RANK | N_RANKS | NNODES)) == (ID | RANK | N_RANKS | NNODES)
                   ? p
                   : NULL;
    }
    if (IS(key, "metadata")) {
        State metadata = {.record = record};
        if (!first_time(state, METADATA)) return NULL;
        p = members(p, end, metadata_member, &metadata, depth);
        return metadata.seen == (VERSION | HOSTNAME) ? p : NULL;
    }
    int coll = IS(key, "coll_perf");
    if (coll || IS(key, "p2p_perf")) {
        /* Exactly one of the two: a second is a record parse_span refuses. */
        State perf = {.record = record, .prefix = coll ? "coll" : "p2p", .prefix_length = coll ? 4 : 3};
        if (!first_time(state, PERF)) return NULL;
        p = members(p, end, perf_member, &perf, depth);
        return (perf.seen & COLLECTIVE) ? p : NULL;
    }
    return skip(p, end, depth);
}

/* One line (without its newline, which `end` points at): 1 if it is a record read here. */
static int read_line(const char *line, const char *end, Record *record) {
    memset(record, 0, sizeof(*record));
    State top = {.record = record};
    const char *p = members(line, end, top_member, &top, 0);
    return p == end && top.seen == (HEADER | METADATA | PERF);
}

static int same_kind(const Record *a, const Record *b) {
#define SAME_SLICE(s) (a->s.length == b->s.length && memcmp(a->s.at, b->s.at, (size_t)a->s.length) == 0)
    return a->has_name == b->has_name && a->n_ranks == b->n_ranks && a->nnodes == b->nnodes &&
           SAME_SLICE(id) && SAME_SLICE(collective) && SAME_SLICE(hostname) &&
           SAME_SLICE(version) && (!a->has_name || SAME_SLICE(name));
#undef SAME_SLICE
}

/* What the lines read so far came to: their distinct kinds, and three columns a line. */
typedef struct {
    Record kinds[MAX_KINDS];
    char *text[MAX_KINDS]; /* each kind's strings, copied: the lines' bytes do not last */
    Py_ssize_t found, last;
    int64_t *columns;
    size_t room, count;
    Py_ssize_t cap;
} Scanner;

static int scanner_init(Scanner *s, Py_ssize_t cap, size_t room) {
    s->found = s->last = 0;
    s->count = 0;
    s->cap = cap;
    s->room = room ? room : 1;
    s->columns = PyMem_RawMalloc(s->room * 3 * sizeof(int64_t));
    return s->columns != NULL;
}

static void scanner_free(Scanner *s) {
    for (Py_ssize_t i = 0; i < s->found; i++) PyMem_RawFree(s->text[i]);
    PyMem_RawFree(s->columns);
}

/* A new kind, its strings copied out of the line (0: no memory). */
static int add_kind(Scanner *s, const Record *record) {
    Record *kind = &s->kinds[s->found];
    *kind = *record;
    Slice *slices[] = {&kind->hostname, &kind->version, &kind->id, &kind->name,
                       &kind->collective};
    size_t total = 1;
    for (size_t i = 0; i < sizeof(slices) / sizeof(*slices); i++) total += (size_t)slices[i]->length;
    char *text = PyMem_RawMalloc(total), *at = text;
    if (text == NULL) return 0;
    for (size_t i = 0; i < sizeof(slices) / sizeof(*slices); i++) {
        if (slices[i]->length) memcpy(at, slices[i]->at, (size_t)slices[i]->length);
        slices[i]->at = at;
        at += slices[i]->length;
    }
    s->text[s->found++] = text;
    return 1;
}

/* The whole lines at the start of [line, stop), each read into the scanner. Returns where
 * the first line without its newline starts (stop if none), or NULL when a whole line is
 * not one read here, is longer than the cap, or memory ran out: then nothing is read. */
static const char *scan_lines(Scanner *s, const char *line, const char *stop) {
    Record record;
    while (line < stop) {
        const char *end = memchr(line, '\n', (size_t)(stop - line));
        if (end == NULL) return line;
        if (end - line + 1 > s->cap || !read_line(line, end, &record)) return NULL;
        Py_ssize_t kind = s->last;
        if (s->found == 0 || !same_kind(&s->kinds[kind], &record)) {
            for (kind = 0; kind < s->found && !same_kind(&s->kinds[kind], &record); kind++) {
            }
            if (kind == s->found && (s->found == MAX_KINDS || !add_kind(s, &record))) return NULL;
            s->last = kind;
        }
        if (s->count == s->room) {
            int64_t *more = PyMem_RawRealloc(s->columns, 2 * s->room * 3 * sizeof(int64_t));
            if (more == NULL) return NULL; /* Python reads them */
            s->columns = more;
            s->room *= 2;
        }
        s->columns[3 * s->count] = kind;
        s->columns[3 * s->count + 1] = record.start;
        s->columns[3 * s->count + 2] = record.stop;
        s->count++;
        line = end + 1;
    }
    return line;
}

static PyObject *text(Slice s) { return PyUnicode_DecodeASCII(s.at, s.length, NULL); }

static PyObject *kind_tuple(const Record *r) {
    PyObject *name = r->has_name ? text(r->name) : Py_NewRef(Py_None);
    if (name == NULL) return NULL;
    return Py_BuildValue("(NNNNLLN)", text(r->hostname), text(r->version), text(r->id), name,
                         (long long)r->n_ranks, (long long)r->nnodes, text(r->collective));
}

/* (kinds, columns) of what the scanner read, as scan() returns them. */
static PyObject *scanned(const Scanner *s) {
    PyObject *list = PyList_New(s->found);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < s->found; i++) {
        PyObject *kind = kind_tuple(&s->kinds[i]);
        if (kind == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, kind);
    }
    PyObject *bytes = PyBytes_FromStringAndSize(
        (const char *)s->columns, (Py_ssize_t)(s->count * 3 * sizeof(int64_t)));
    if (bytes == NULL) {
        Py_DECREF(list);
        return NULL;
    }
    return Py_BuildValue("(NN)", list, bytes);
}

/* A record's line is longer than 128 bytes (its required members alone): room for all of
 * `bytes`, grown should shorter lines come. */
static size_t room_for(Py_ssize_t bytes) { return (size_t)bytes / 128 + 1; }

/* scan(lines, max_object_bytes) -> (kinds, columns) or None.
 *
 * `lines`: whole lines, the last ending with a newline. kinds: one tuple (hostname,
 * format version, communicator id, comm_name or None, n_ranks, nnodes, collective) for
 * each distinct one, in the order first seen; columns: for each line three native int64,
 * its kind's index, start and stop in microseconds (0: none). None when any line is not
 * one this reads (see the top of this file), or is longer than max_object_bytes with its
 * newline. */
static PyObject *scan(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer view;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "y*n", &view, &cap)) return NULL;
    const char *data = view.buf, *stop = data + view.len;
    Scanner *s = PyMem_RawMalloc(sizeof(Scanner));
    if (s == NULL || !scanner_init(s, cap, room_for(view.len))) {
        PyMem_RawFree(s);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const char *after = NULL;
    if (view.len > 0 && stop[-1] == '\n') {
        Py_BEGIN_ALLOW_THREADS
        after = scan_lines(s, data, stop);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = after == stop ? scanned(s) : Py_NewRef(Py_None);
    scanner_free(s);
    PyMem_RawFree(s);
    PyBuffer_Release(&view);
    return result;
}

/* scan_file(fd, offset, length, prefix, max_object_bytes, chunk)
 *     -> (kinds, columns, consumed) or None.
 *
 * The lines of `prefix` followed by the file's bytes [offset, offset + length), read as
 * scan() reads them, up to the last newline: `consumed` counts the bytes of prefix and
 * file up to it. The file is read `chunk` bytes at a time into one buffer that each chunk's
 * lines are read from at once: a poll's megabyte is copied out of the page cache into a
 * buffer that stays in the processor's cache, not into a megabyte of fresh memory read a
 * second time (in this VM that was 1.3 ms against 0.4 a second of records; reading the
 * chunks to memory first and then the lines was the cost of both). None when a line is not
 * one read here, a line is longer than max_object_bytes, none ends within the bytes read,
 * or the file cannot be read: the caller reads the bytes its slower way, which judges
 * each of those. A file that shrank meanwhile gives what it still had. */
static PyObject *scan_file(PyObject *module, PyObject *args) {
    (void)module;
    int fd;
    long long offset;
    Py_ssize_t length, cap, chunk;
    Py_buffer prefix;
    if (!PyArg_ParseTuple(args, "iLny*nn", &fd, &offset, &length, &prefix, &cap, &chunk))
        return NULL;
    if (cap < 1 || chunk < 1 || length < 0 || offset < 0 || prefix.len > cap) {
        PyBuffer_Release(&prefix);
        Py_RETURN_NONE;
    }
    /* A line without its newline is kept at the buffer's start (at most cap bytes, else it
     * is too long) and the next chunk read after it. */
    char *buffer = PyMem_RawMalloc((size_t)cap + (size_t)chunk);
    Scanner *s = PyMem_RawMalloc(sizeof(Scanner));
    if (buffer == NULL || s == NULL ||
        !scanner_init(s, cap, room_for(length < chunk ? length : chunk))) {
        PyMem_RawFree(buffer);
        PyMem_RawFree(s);
        PyBuffer_Release(&prefix);
        return PyErr_NoMemory();
    }
    Py_ssize_t held = prefix.len, consumed = 0, before = prefix.len;
    if (held) memcpy(buffer, prefix.buf, (size_t)held);
    PyBuffer_Release(&prefix);
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t remaining = length;
    off_t at = (off_t)offset;
    while (remaining > 0) {
        ssize_t got = pread(fd, buffer + held, (size_t)(remaining < chunk ? remaining : chunk), at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            ok = 0;
            break;
        }
        if (got == 0) break; /* the file shrank */
        at += got;
        remaining -= got;
        Py_ssize_t fill = held + got;
        const char *after = scan_lines(s, buffer, buffer + fill);
        if (after == NULL) {
            ok = 0;
            break;
        }
        Py_ssize_t whole = after - buffer;
        consumed += whole;
        held = fill - whole;
        if (held > cap) { /* a line already longer than the cap */
            ok = 0;
            break;
        }
        if (whole && held) memmove(buffer, after, (size_t)held);
    }
    Py_END_ALLOW_THREADS
    PyObject *inner = NULL, *result = NULL;
    if (!ok || consumed < before || consumed == 0) {
        result = Py_NewRef(Py_None);
    } else if ((inner = scanned(s)) != NULL) {
        result = Py_BuildValue("(OOn)", PyTuple_GET_ITEM(inner, 0), PyTuple_GET_ITEM(inner, 1),
                               consumed);
        Py_DECREF(inner);
    }
    scanner_free(s);
    PyMem_RawFree(s);
    PyMem_RawFree(buffer);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Compact Inspector lines as span columns, or None."},
    {"scan_file", scan_file, METH_VARARGS,
     "A file's compact Inspector lines read in chunks, as span columns, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spans", "NCCL Inspector lines read for spans, in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spans(void) {
    init_plain();
    return PyModule_Create(&module);
}
