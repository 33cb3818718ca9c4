/* The floor of any reader of a scope_stats file (issue 27): a minimal compiled single pass.
 *
 * Reads the file in 1 MiB chunks, splits it into lines, parses every integer value on each line
 * (the digits that follow ": ") and keeps the per-ring maxima of them.  No JSON validation, no check,
 * no pairing, no interpreter: what no reader can do with less.  Built and run by bench_core.py
 * (`cc -O2 floor.c -o floor`); prints the lines and a checksum of the maxima so the work is kept.
 *
 *     floor FILE
 */
#include <stdio.h>
#include <string.h>

#define CHUNK (1 << 20)
#define RINGS 64
#define VALUES 16

static char buf[CHUNK];

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: floor FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (f == NULL) {
        perror(argv[1]);
        return 2;
    }
    static long long maxima[RINGS][VALUES];
    long long values[VALUES], cur = 0, lines = 0;
    int n = 0, in_number = 0;
    char prev = 0;
    size_t len;
    while ((len = fread(buf, 1, CHUNK, f)) > 0) {
        for (size_t i = 0; i < len; i++) {
            char c = buf[i];
            if (c >= '0' && c <= '9' && (in_number || prev == ' ')) {
                cur = cur * 10 + (c - '0');
                in_number = 1;
            } else {
                if (in_number && n < VALUES)
                    values[n++] = cur;
                cur = 0;
                in_number = 0;
                if (c == '\n') {
                    if (n > 2) { /* depth, ring, counters...: the ring is the second value */
                        long long ring = values[1] & (RINGS - 1);
                        for (int k = 2; k < n; k++)
                            if (values[k] > maxima[ring][k])
                                maxima[ring][k] = values[k];
                    }
                    n = 0;
                    lines++;
                }
            }
            prev = c;
        }
    }
    fclose(f);
    long long sum = 0;
    for (int r = 0; r < RINGS; r++)
        for (int k = 0; k < VALUES; k++)
            sum += maxima[r][k];
    printf("lines=%lld checksum=%lld\n", lines, sum);
    return 0;
}
