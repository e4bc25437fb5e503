/* The compact layout's packer in C: Packing.pack (apps/telemetry/packing.py) for the common case,
 * the same bytes as the Python code gives, which stays the specification and the fallback.
 *
 * pack(spec, items) -> bytes | None
 * pack_structs(spec, type, offsets, structs) -> bytes | None   (offsets: slot_offsets(type, names))
 *
 *   spec   what Packing._spec holds: per field, struct "=Bqqq": kind (0 integer or boolean, 1 float,
 *          2 string), lower bound, steps per unit, offset (round(lower * steps))
 *   items  a list of tuples, one value per field each (None: absent); or, for pack_structs, a list of
 *          instances of exactly ``type`` whose slots at ``offsets`` hold those values (a protocol struct:
 *          no tuple is made of it first)
 *
 * None means "not handled here": anything outside the common case (not a list of tuples of the right
 * size, more than 255 items, a value of an unexpected type, out of range or negative once its lower
 * bound is taken off, an integer past 63 bits) goes to the Python code, which packs it or raises as
 * it always has. At 1,000 nodes the writer packs 2,000 values a second; the Python packer's per-field
 * work (zip, dict lookups by value, joins) cost about 6 us an 8-GPU value, this about 1 us.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <string.h>

enum { KIND_INT = 0, KIND_FLOAT = 1, KIND_STR = 2 };
enum { ABSENT = 0, SAME = 1, EACH = 2, SOME = 3 };
enum { SPEC_SIZE = 1 + 3 * 8, MAX_ITEMS = 255 };
enum { HANDLED = 1, UNHANDLED = 0, FAILED = -1 };

typedef struct {
    unsigned char kind;
    long long lower, steps, offset;
} FieldSpec;

typedef struct {
    unsigned char *data;
    Py_ssize_t size, capacity;
} Buffer;

static int reserve(Buffer *buffer, Py_ssize_t extra) {
    if (buffer->size + extra <= buffer->capacity) return 0;
    Py_ssize_t capacity = buffer->capacity * 2;
    if (capacity < buffer->size + extra) capacity = buffer->size + extra;
    unsigned char *data = PyMem_Realloc(buffer->data, capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    buffer->data = data;
    buffer->capacity = capacity;
    return 0;
}

static void put_uint(Buffer *buffer, unsigned long long value, int width) {
    for (int i = 0; i < width; i++) buffer->data[buffer->size++] = (unsigned char)(value >> (8 * i));
}

static int width_code(unsigned long long largest) {
    if (largest < 0x100ULL) return 0;
    if (largest < 0x10000ULL) return 1;
    if (largest < 0x100000000ULL) return 2;
    return 3;
}

static const int WIDTHS[4] = {1, 2, 4, 8};

/* A number's stored integer: steps above its lower bound. */
static int stored_number(const FieldSpec *field, PyObject *value, unsigned long long *stored) {
    long long whole;
    if (field->kind == KIND_FLOAT) {
        if (!PyFloat_CheckExact(value)) return UNHANDLED;
        double scaled = PyFloat_AS_DOUBLE(value) * (double)field->steps;
        if (!isfinite(scaled) || fabs(scaled) >= 4e18) return UNHANDLED;
        double rounded = round(scaled); /* Python's round(): halves to even */
        if (fabs(scaled - rounded) == 0.5) rounded = 2.0 * round(scaled / 2.0);
        whole = (long long)rounded;
        if (__builtin_sub_overflow(whole, field->offset, &whole)) return UNHANDLED;
    } else {
        if (!PyLong_Check(value)) return UNHANDLED; /* booleans are integers */
        int overflow = 0;
        whole = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow) return UNHANDLED;
        if (whole == -1 && PyErr_Occurred()) return FAILED;
        if (__builtin_sub_overflow(whole, field->lower, &whole)) return UNHANDLED;
    }
    if (whole < 0) return UNHANDLED;
    *stored = (unsigned long long)whole;
    return HANDLED;
}

/* One field's section (after its bitmap, if any): the values of ``chosen`` items, or of the first alone. */
/* The items' values, item by item: values[item * fields + position] (borrowed references). */
typedef struct {
    PyObject **values;
    Py_ssize_t fields;
} Matrix;

#define VALUE(matrix, item, position) ((matrix)->values[(item) * (matrix)->fields + (position)])

static int numbers_section(const FieldSpec *field, const Matrix *items, Py_ssize_t position, const Py_ssize_t *chosen,
                           Py_ssize_t chosen_count, Buffer *buffer, int *code) {
    unsigned long long stored[MAX_ITEMS], largest = 0;
    for (Py_ssize_t i = 0; i < chosen_count; i++) {
        PyObject *value = VALUE(items, chosen[i], position);
        int found = stored_number(field, value, &stored[i]);
        if (found != HANDLED) return found;
        if (stored[i] > largest) largest = stored[i];
    }
    *code = width_code(largest);
    if (reserve(buffer, chosen_count * WIDTHS[*code]) < 0) return FAILED;
    for (Py_ssize_t i = 0; i < chosen_count; i++) put_uint(buffer, stored[i], WIDTHS[*code]);
    return HANDLED;
}

static int strings_section(const Matrix *items, Py_ssize_t position, const Py_ssize_t *chosen, Py_ssize_t chosen_count,
                           Buffer *buffer, int *code) {
    const char *text[MAX_ITEMS];
    Py_ssize_t sizes[MAX_ITEMS], largest = 0, total = 0;
    for (Py_ssize_t i = 0; i < chosen_count; i++) {
        PyObject *value = VALUE(items, chosen[i], position);
        if (!PyUnicode_Check(value)) return UNHANDLED;
        text[i] = PyUnicode_AsUTF8AndSize(value, &sizes[i]);
        if (text[i] == NULL) {
            PyErr_Clear(); /* a lone surrogate: Python's str.encode says so */
            return UNHANDLED;
        }
        if (sizes[i] > largest) largest = sizes[i];
        total += sizes[i];
    }
    *code = width_code((unsigned long long)largest);
    if (reserve(buffer, chosen_count * WIDTHS[*code] + total) < 0) return FAILED;
    for (Py_ssize_t i = 0; i < chosen_count; i++) {
        put_uint(buffer, (unsigned long long)sizes[i], WIDTHS[*code]);
        memcpy(buffer->data + buffer->size, text[i], sizes[i]);
        buffer->size += sizes[i];
    }
    return HANDLED;
}

/* One field's nibble and section, as Packing._section makes them. */
static int field_section(const FieldSpec *field, const Matrix *items, Py_ssize_t count, Py_ssize_t position,
                         Buffer *buffer, unsigned char *nibble) {
    PyObject *first = VALUE(items, 0, position);
    Py_ssize_t present[MAX_ITEMS], present_count = 0;
    int same = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value = VALUE(items, i, position);
        if (value != Py_None) present[present_count++] = i;
        if (same && i > 0) {
            int equal = PyObject_RichCompareBool(value, first, Py_EQ);
            if (equal < 0) return FAILED;
            same = equal;
        }
    }
    int mode, code = 0, found;
    Py_ssize_t chosen_count;
    if (same) {
        if (first == Py_None) {
            *nibble = ABSENT;
            return HANDLED;
        }
        mode = SAME;
        chosen_count = 1;
    } else if (present_count < count) {
        mode = SOME;
        chosen_count = present_count;
        Py_ssize_t bitmap = (count + 7) / 8;
        if (reserve(buffer, bitmap) < 0) return FAILED;
        memset(buffer->data + buffer->size, 0, bitmap);
        for (Py_ssize_t i = 0; i < present_count; i++)
            buffer->data[buffer->size + present[i] / 8] |= (unsigned char)(1 << (present[i] % 8));
        buffer->size += bitmap;
    } else {
        mode = EACH;
        chosen_count = count;
    }
    if (field->kind == KIND_STR)
        found = strings_section(items, position, present, chosen_count, buffer, &code);
    else
        found = numbers_section(field, items, position, present, chosen_count, buffer, &code);
    *nibble = (unsigned char)(mode | code << 2);
    return found;
}

/* The spec's field count, or -1 with an exception set. */
static Py_ssize_t spec_fields(PyObject *spec) {
    if (!PyBytes_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "pack: a spec is bytes");
        return -1;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(spec);
    if (size % SPEC_SIZE != 0 || size / SPEC_SIZE > 255) {
        PyErr_SetString(PyExc_ValueError, "pack: a spec is up to 255 fields of 25 bytes");
        return -1;
    }
    return size / SPEC_SIZE;
}

/* The packed value of ``count`` items of the spec's fields; None: not handled here. */
static PyObject *pack_matrix(PyObject *spec, const Matrix *items, Py_ssize_t count) {
    Py_ssize_t fields = items->fields;
    const char *raw = PyBytes_AS_STRING(spec);
    Py_ssize_t header = 2 + (fields + 1) / 2;
    Buffer buffer = {PyMem_Malloc(header + 64 * fields), 0, header + 64 * fields};
    if (buffer.data == NULL) return PyErr_NoMemory();
    memset(buffer.data, 0, header);
    buffer.data[0] = (unsigned char)fields;
    buffer.data[1] = (unsigned char)count;
    buffer.size = header;
    int found = HANDLED;
    for (Py_ssize_t position = 0; count && position < fields && found == HANDLED; position++) {
        FieldSpec field;
        const char *at = raw + position * SPEC_SIZE;
        field.kind = (unsigned char)at[0];
        memcpy(&field.lower, at + 1, 8);
        memcpy(&field.steps, at + 9, 8);
        memcpy(&field.offset, at + 17, 8);
        unsigned char nibble = 0;
        found = field_section(&field, items, count, position, &buffer, &nibble);
        buffer.data[2 + position / 2] |= (unsigned char)(nibble << (4 * (position % 2)));
    }
    PyObject *packed = NULL;
    if (found == HANDLED)
        packed = PyBytes_FromStringAndSize((const char *)buffer.data, buffer.size);
    else if (found == UNHANDLED)
        packed = Py_NewRef(Py_None);
    PyMem_Free(buffer.data);
    return packed;
}

static PyObject *pack(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "pack(spec: bytes, items: list[tuple])");
        return NULL;
    }
    Py_ssize_t fields = spec_fields(args[0]);
    if (fields < 0) return NULL;
    PyObject *list = args[1];
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) > MAX_ITEMS) Py_RETURN_NONE;
    Py_ssize_t count = PyList_GET_SIZE(list);
    PyObject **values = PyMem_Malloc(sizeof(PyObject *) * count * fields); /* not NULL for 0 bytes */
    if (values == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != fields) {
            PyMem_Free(values);
            Py_RETURN_NONE;
        }
        memcpy(values + i * fields, &PyTuple_GET_ITEM(item, 0), sizeof(PyObject *) * fields);
    }
    Matrix items = {values, fields};
    PyObject *packed = pack_matrix(args[0], &items, count);
    PyMem_Free(values);
    return packed;
}

/* Where each named attribute of ``type`` lives in its instances: the offsets of its slots (member
 * descriptors holding an object), as Py_ssize_t bytes; None if any of them is something else, or
 * not an attribute of the type. */
static PyObject *slot_offsets(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "slot_offsets(type, names: tuple[str, ...])");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(args[1]);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, sizeof(Py_ssize_t) * count);
    if (offsets == NULL) return NULL;
    Py_ssize_t *at = (Py_ssize_t *)PyBytes_AS_STRING(offsets);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *descriptor = PyObject_GetAttr(args[0], PyTuple_GET_ITEM(args[1], i));
        if (descriptor == NULL) {
            Py_DECREF(offsets);
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
            PyErr_Clear(); /* an attribute of the instances alone */
            Py_RETURN_NONE;
        }
        int usable = Py_IS_TYPE(descriptor, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)descriptor)->d_member->type == T_OBJECT_EX;
        if (usable) at[i] = ((PyMemberDescrObject *)descriptor)->d_member->offset;
        Py_DECREF(descriptor);
        if (!usable) {
            Py_DECREF(offsets);
            Py_RETURN_NONE;
        }
    }
    return offsets;
}

/* pack_structs(spec, type, offsets, structs): ``pack`` of a list of instances of exactly ``type``, each
 * item's values read from its slots at ``offsets`` (slot_offsets) rather than from a tuple made first. */
static PyObject *pack_structs(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyType_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "pack_structs(spec: bytes, type, offsets: bytes, structs: list)");
        return NULL;
    }
    Py_ssize_t fields = spec_fields(args[0]);
    if (fields < 0) return NULL;
    if (PyBytes_GET_SIZE(args[2]) != (Py_ssize_t)sizeof(Py_ssize_t) * fields) {
        PyErr_SetString(PyExc_ValueError, "pack_structs: one offset per field");
        return NULL;
    }
    const Py_ssize_t *offsets = (const Py_ssize_t *)PyBytes_AS_STRING(args[2]);
    PyObject *list = args[3];
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) > MAX_ITEMS) Py_RETURN_NONE;
    Py_ssize_t count = PyList_GET_SIZE(list);
    PyObject **values = PyMem_Malloc(sizeof(PyObject *) * count * fields);
    if (values == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int usable = Py_IS_TYPE(item, (PyTypeObject *)args[1]);
        for (Py_ssize_t position = 0; usable && position < fields; position++) {
            PyObject *value = *(PyObject **)((char *)item + offsets[position]);
            values[i * fields + position] = value;
            usable = value != NULL; /* an unset slot */
        }
        if (!usable) {
            PyMem_Free(values);
            Py_RETURN_NONE;
        }
    }
    Matrix items = {values, fields};
    PyObject *packed = pack_matrix(args[0], &items, count);
    PyMem_Free(values);
    return packed;
}

static PyMethodDef methods[] = {
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, "Pack items as Packing.pack does; None: not handled."},
    {"pack_structs", (PyCFunction)(void (*)(void))pack_structs, METH_FASTCALL,
     "Pack instances of a type, their values read from its slots; None: not handled."},
    {"slot_offsets", (PyCFunction)(void (*)(void))slot_offsets, METH_FASTCALL,
     "The offsets of a type's slots by name, as Py_ssize_t bytes; None: not all of them slots."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_packing", NULL, 0, methods};

PyMODINIT_FUNC PyInit__packing(void) { return PyModule_Create(&module); }
