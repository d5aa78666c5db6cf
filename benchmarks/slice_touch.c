/* The op's access pattern with no work: read and rewrite exactly the slice bytes of every row, in place,
 * with the simplest loop, split over threads like the kernel. Compiled by run.py; not part of the package.
 * `delta` is 0 at run time, so the data is unchanged, but the compiler must still load and store every byte. */
#include <pthread.h>
#include <stdint.h>

struct rows_job {
  unsigned char *base;
  int64_t rows, row_bytes, offset, bytes;
  unsigned char delta;
};

static void *touch_rows(void *arg) {
  const struct rows_job job = *(const struct rows_job *)arg;  /* a local copy: the char stores can't alias it */
  for (int64_t r = 0; r < job.rows; ++r) {
    unsigned char *slice = job.base + r * job.row_bytes + job.offset;
    for (int64_t i = 0; i < job.bytes; ++i) slice[i] += job.delta;
  }
  return 0;
}

int slice_touch(void *base, int64_t rows, int64_t row_bytes, int64_t offset, int64_t bytes, int threads,
                unsigned char delta) {
  enum { kMaxThreads = 64 };
  pthread_t ids[kMaxThreads];
  struct rows_job jobs[kMaxThreads];
  if (threads < 1 || threads > kMaxThreads) return 1;
  const int64_t per = (rows + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t first = t * per < rows ? t * per : rows;
    const int64_t count = rows - first < per ? rows - first : per;
    jobs[t] = (struct rows_job){(unsigned char *)base + first * row_bytes, count, row_bytes, offset, bytes, delta};
    if (t > 0 && pthread_create(&ids[t], 0, touch_rows, &jobs[t]) != 0) return 2;
  }
  touch_rows(&jobs[0]);
  for (int t = 1; t < threads; ++t) pthread_join(ids[t], 0);
  return 0;
}
