/* The whole userland of the firmware test's initramfs: PID 1 says it runs on the serial console,
 * with the kernel command line it was given, and powers the machine off. Built static by
 * `make boot-kernel`; Tests/interop/test_firmware.py packs it into a newc cpio. */
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <unistd.h>

static void say(int fd, const char *text)
{
    if (write(fd, text, strlen(text)) < 0)
        return;
}

int main(void)
{
    char line[512];
    ssize_t n;
    int fd, cmdline;
    mkdir("/dev", 0755);
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    mkdir("/proc", 0555);
    mount("proc", "/proc", "proc", 0, NULL);
    fd = open("/dev/ttyS0", O_WRONLY | O_NOCTTY);
    if (fd < 0)
        fd = open("/dev/console", O_WRONLY | O_NOCTTY);
    say(fd, "\nstampede-initrd: init runs, cmdline: ");
    cmdline = open("/proc/cmdline", O_RDONLY);
    n = cmdline < 0 ? -1 : read(cmdline, line, sizeof(line) - 1);
    if (n > 0)
        say(fd, (line[n] = 0, line));
    say(fd, "stampede-initrd: BOOTED\n");
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}
