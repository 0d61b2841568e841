/* Prints how many BPF programs whose names start with "thr_" (the tracer's) are loaded, by
 * raw bpf(2) calls: the guest of `cargo xtask kernels` has no bpftool. */
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr) {
    return syscall(__NR_bpf, cmd, attr, sizeof *attr);
}

int main(void) {
    unsigned id = 0, count = 0;
    for (;;) {
        union bpf_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.start_id = id;
        if (sys_bpf(BPF_PROG_GET_NEXT_ID, &attr) < 0)
            break;
        id = attr.next_id;
        memset(&attr, 0, sizeof attr);
        attr.prog_id = id;
        int fd = sys_bpf(BPF_PROG_GET_FD_BY_ID, &attr);
        if (fd < 0)
            continue;
        struct bpf_prog_info info;
        memset(&info, 0, sizeof info);
        memset(&attr, 0, sizeof attr);
        attr.info.bpf_fd = fd;
        attr.info.info_len = sizeof info;
        attr.info.info = (unsigned long)&info;
        if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) == 0 && strncmp(info.name, "thr_", 4) == 0)
            count++;
        close(fd);
    }
    printf("%u\n", count);
    return 0;
}
