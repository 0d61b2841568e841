/* What the C analyzers of the tests check each call with: CHECK(call) returns 1 from main,
 * naming the call and its error, unless it returns 0; EXPECT(call, error) unless it returns
 * that error. */
#ifndef ANALYZERS_CHECK_H
#define ANALYZERS_CHECK_H

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        int error_ = (call);                                                         \
        if (error_ != 0) {                                                           \
            fprintf(stderr, "%s: %s\n", #call, strerror(error_));                    \
            return 1;                                                                \
        }                                                                            \
    } while (0)

#define EXPECT(call, error)                                                          \
    do {                                                                             \
        int error_ = (call);                                                         \
        if (error_ != (error)) {                                                     \
            fprintf(stderr, "%s: %d, not %s\n", #call, error_, #error);              \
            return 1;                                                                \
        }                                                                            \
    } while (0)

#endif
