/* The wrappers of tdm_device_iface (src/backends/device.c), on hand-made devices:
 *  - a member is called only when the interface's api_version has it: a version-2 interface
 *    whose later members hold functions (as the bytes past an old plug-in's struct might)
 *    never has them called;
 *  - the defaults of optional members: synchronize, configure, segment_begin/end are no-ops,
 *    kernel_flags is 0, event_free/host_free/buffer_free do nothing, close is NULL-safe;
 *  - members a device lacks and the caller needs give TDM_ERR_UNSUPPORTED naming the device;
 *  - event_wait on a device without it waits on the host through the owner's event_sync;
 *  - the has_* questions answer from the members the version allows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backends/backend.h"
#include "tandem/tandem.h"
#include "test_ok.h"

/* calls per member, by the fake devices below */
static int n_sync, n_event_sync, n_event_free, n_configure, n_flags, n_begin, n_close;

static tdm_status *f_synchronize(tdm_device *d) {
    (void)d;
    n_sync++;
    return NULL;
}
static tdm_status *f_event_record(tdm_device *d, void **ev) {
    (void)d;
    *ev = &n_event_sync;
    return NULL;
}
static tdm_status *f_event_wait(tdm_device *d, tdm_device *owner, void *ev) {
    (void)d;
    (void)owner;
    (void)ev;
    return NULL;
}
static tdm_status *f_event_sync(tdm_device *d, void *ev) {
    (void)d;
    (void)ev;
    n_event_sync++;
    return NULL;
}
static void f_event_free(tdm_device *d, void *ev) {
    (void)d;
    (void)ev;
    n_event_free++;
}
static tdm_status *f_configure(tdm_device *d, const char *k, const char *v) {
    (void)d;
    (void)k;
    (void)v;
    n_configure++;
    return NULL;
}
static tdm_status *f_begin(tdm_device *d, uint64_t key) {
    (void)d;
    (void)key;
    n_begin++;
    return NULL;
}
static unsigned f_flags(tdm_device *d, const tdm_kernel_def *k, const tdm_node *n) {
    (void)d;
    (void)k;
    (void)n;
    n_flags++;
    return TDM_KF_WRITES_ALL;
}
static int n_queued;
static int n_register, n_unregister;

static tdm_status *f_host_register(tdm_device *d, void *host, size_t size) {
    (void)d;
    (void)host;
    (void)size;
    n_register++;
    return NULL;
}

static void f_host_unregister(tdm_device *d, void *host) {
    (void)d;
    (void)host;
    n_unregister++;
}

static tdm_status *f_upload_queued(tdm_device *d, void *buf, const void *host, size_t size,
                                   void *after, void **done) {
    (void)d;
    (void)buf;
    (void)host;
    (void)size;
    (void)after;
    *done = NULL;
    n_queued++;
    return NULL;
}
static void f_close(tdm_device *d) {
    (void)d;
    n_close++;
}

/* Every optional member filled in; api_version chosen per test. */
static tdm_device_iface full_iface(int version) {
    tdm_device_iface f = {
        .api_version = version,
        .synchronize = f_synchronize,
        .close = f_close,
        .event_record = f_event_record,
        .event_wait = f_event_wait,
        .event_sync = f_event_sync,
        .event_free = f_event_free,
        .configure = f_configure,
        .segment_begin = f_begin,
        .kernel_flags = f_flags,
        .upload_queued = f_upload_queued,
        .host_register = f_host_register,
        .host_unregister = f_host_unregister,
    };
    return f;
}

static void reset(void) {
    n_sync = n_event_sync = n_event_free = n_configure = n_flags = n_begin = n_close = n_queued = 0;
    n_register = n_unregister = 0;
}

static void expect_unsupported(tdm_status *st, const char *device) {
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
    assert_non_null(strstr(tdm_status_message(st), device));
    tdm_status_free(st);
}

/* A version-2 interface: the members of versions 3..5 are not read, whatever they hold. */
static void test_version_gates_members(void **state) {
    (void)state;
    reset();
    tdm_device_iface f = full_iface(2);
    tdm_device d = {.iface = &f, .name = "old:0"};
    int ev = 0;
    void *out = NULL;
    expect_unsupported(tdm_device_event_sync(&d, &ev), "old:0");
    expect_unsupported(tdm_device_event_record(&d, &out), "old:0");
    assert_null(out);
    tdm_device_event_free(&d, &ev);
    OK(tdm_device_configure(&d, "precision", "fp16"));
    OK(tdm_device_segment_begin(&d, 7));
    OK(tdm_device_segment_end(&d, true));
    assert_int_equal(tdm_device_kernel_flags(&d, (const tdm_kernel_def *)&ev, NULL), 0);
    assert_int_equal(n_event_sync + n_event_free + n_configure + n_begin + n_flags, 0);
    assert_false(tdm_device_has_events(&d));
    assert_false(tdm_device_has_segments(&d));
    assert_false(tdm_device_has_copy_queue(&d));
    expect_unsupported(tdm_device_upload_queued(&d, &ev, &ev, 4, NULL, &out), "old:0");
    assert_int_equal(n_queued, 0);
    /* version 6 does not have the copy queue either */
    tdm_device_iface f6 = full_iface(6);
    tdm_device d6 = {.iface = &f6, .name = "six:0"};
    assert_false(tdm_device_has_copy_queue(&d6));
    expect_unsupported(tdm_device_upload_queued(&d6, &ev, &ev, 4, NULL, &out), "six:0");
    assert_int_equal(n_queued, 0);
    /* version 7 does not have registered host memory */
    tdm_device_iface f7 = full_iface(7);
    tdm_device d7 = {.iface = &f7, .name = "seven:0"};
    assert_false(tdm_device_has_host_register(&d7));
    expect_unsupported(tdm_device_host_register(&d7, &ev, 4), "seven:0");
    tdm_device_host_unregister(&d7, &ev);
    assert_int_equal(n_register + n_unregister, 0);
    /* version 1 members are read */
    OK(tdm_device_synchronize(&d));
    assert_int_equal(n_sync, 1);
    assert_true(tdm_device_has_synchronize(&d));
    tdm_device_close(&d);
    assert_int_equal(n_close, 1);
}

/* The same members at version 5 are called. */
static void test_current_version_calls_members(void **state) {
    (void)state;
    reset();
    tdm_device_iface f = full_iface(TDM_DEVICE_IFACE_VERSION);
    tdm_device d = {.iface = &f, .name = "new:0"};
    int ev = 0;
    OK(tdm_device_event_sync(&d, &ev));
    tdm_device_event_free(&d, &ev);
    OK(tdm_device_configure(&d, "precision", "fp16"));
    OK(tdm_device_segment_begin(&d, 7));
    assert_int_equal(tdm_device_kernel_flags(&d, (const tdm_kernel_def *)&ev, NULL),
                     TDM_KF_WRITES_ALL);
    assert_int_equal(n_event_sync, 1);
    assert_int_equal(n_event_free, 1);
    assert_int_equal(n_configure, 1);
    assert_int_equal(n_begin, 1);
    assert_int_equal(n_flags, 1);
    assert_true(tdm_device_has_events(&d));
    assert_true(tdm_device_has_copy_queue(&d));
    void *done = &ev;
    OK(tdm_device_upload_queued(&d, &ev, &ev, 4, NULL, &done));
    assert_int_equal(n_queued, 1);
    assert_true(tdm_device_has_host_register(&d));
    OK(tdm_device_host_register(&d, &ev, 4));
    tdm_device_host_unregister(&d, &ev);
    tdm_device_host_unregister(&d, NULL); /* NULL: not handed on */
    assert_int_equal(n_register, 1);
    assert_int_equal(n_unregister, 1);
    /* segment_end missing: no launch windows, and segment_end is a no-op */
    assert_false(tdm_device_has_segments(&d));
    OK(tdm_device_segment_end(&d, true));
    /* a NULL event is not handed to event_free; no kernel: no flags asked */
    tdm_device_event_free(&d, NULL);
    assert_int_equal(n_event_free, 1);
    assert_int_equal(tdm_device_kernel_flags(&d, NULL, NULL), 0);
    assert_int_equal(n_flags, 1);
}

/* A host-memory device with only the required members. */
static void test_missing_members(void **state) {
    (void)state;
    reset();
    tdm_device_iface f = {.api_version = TDM_DEVICE_IFACE_VERSION};
    tdm_device d = {.iface = &f, .name = "bare:0", .host_memory = true};
    void *buf = NULL;
    char host[4] = {0};
    expect_unsupported(tdm_device_buffer_alloc(&d, 16, &buf), "bare:0");
    assert_null(buf);
    expect_unsupported(tdm_device_upload(&d, host, host, 4), "bare:0");
    expect_unsupported(tdm_device_download(&d, host, host, 4), "bare:0");
    expect_unsupported(tdm_device_download_async(&d, host, host, 4, &buf), "bare:0");
    expect_unsupported(tdm_device_host_alloc(&d, 16, &buf), "bare:0");
    assert_null(buf);
    expect_unsupported(tdm_device_execute(&d, NULL, NULL), "bare:0");
    assert_null(tdm_device_find_kernel(&d, NULL, NULL, 0));
    tdm_device_buffer_free(&d, host);
    tdm_device_host_free(&d, host);
    OK(tdm_device_synchronize(&d));
    OK(tdm_device_configure(&d, "precision", "fp16"));
    assert_false(tdm_device_has_synchronize(&d));
    assert_false(tdm_device_has_buffers(&d));
    assert_false(tdm_device_has_staging(&d));
    assert_false(tdm_device_has_async_copies(&d));
    tdm_device_close(&d); /* no close member: nothing */
    tdm_device_close(NULL);
    assert_false(tdm_device_has_events(NULL));
}

/* event_wait on a device without it: the owner's event_sync blocks the host. */
static void test_event_wait_default(void **state) {
    (void)state;
    reset();
    tdm_device_iface waiter_f = {.api_version = TDM_DEVICE_IFACE_VERSION};
    tdm_device waiter = {.iface = &waiter_f, .name = "waiter:0"};
    tdm_device_iface owner_f = full_iface(TDM_DEVICE_IFACE_VERSION);
    tdm_device owner = {.iface = &owner_f, .name = "owner:0"};
    int ev = 0;
    OK(tdm_device_event_wait(&waiter, &owner, &ev));
    assert_int_equal(n_event_sync, 1);
    /* an owner without events cannot be waited on */
    expect_unsupported(tdm_device_event_wait(&waiter, &waiter, &ev), "waiter:0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_gates_members),
        cmocka_unit_test(test_current_version_calls_members),
        cmocka_unit_test(test_missing_members),
        cmocka_unit_test(test_event_wait_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
