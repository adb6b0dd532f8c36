"""A slow disk for the tests: a FUSE file system that mirrors a directory and takes its time where
a real disk under load does (fsync, directory reads, every write, and, for a name that begins
with "slow", looking it up, a cold directory on a busy disk, opening it, and reading its first
bytes, a cold file).
Run as a process of its own:

    python slowdisk.py BACKING MOUNTPOINT --fsync 2 --readdir 0.5 --lookup 3 --read 3 --open 3 --write 0.2

It cannot reserve space (no fallocate: FAT, many FUSE and older NFS file systems cannot), so a
server that falls back to writing every block of a reservation does so through it, slowly."""
import argparse
import os
import time

from fuse import FUSE, Operations


class SlowDisk(Operations):
    def __init__(self, backing, fsync_delay, readdir_delay, lookup_delay=0.0, read_delay=0.0, open_delay=0.0,
                 write_delay=0.0):
        self.backing = backing
        self.write_delay = write_delay
        self.fsync_delay = fsync_delay
        self.readdir_delay = readdir_delay
        self.lookup_delay = lookup_delay
        self.read_delay = read_delay
        self.open_delay = open_delay

    def path(self, path):
        return os.path.join(self.backing, path.lstrip("/"))

    # Names
    def getattr(self, path, fh=None):
        if fh is None and os.path.basename(path).startswith("slow"):
            time.sleep(self.lookup_delay)
        st = os.lstat(self.path(path)) if fh is None else os.fstat(fh)
        return {key: getattr(st, key) for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime",
                                                  "st_mtime", "st_ctime", "st_ino", "st_blocks")}

    def readdir(self, path, fh):
        time.sleep(self.readdir_delay)
        return [".", ".."] + os.listdir(self.path(path))

    def readlink(self, path):
        return os.readlink(self.path(path))

    def mkdir(self, path, mode):
        os.mkdir(self.path(path), mode)

    def rmdir(self, path):
        os.rmdir(self.path(path))

    def unlink(self, path):
        os.unlink(self.path(path))

    def rename(self, old, new):
        os.rename(self.path(old), self.path(new))

    def chmod(self, path, mode):
        os.chmod(self.path(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self.path(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self.path(path), times)

    def statfs(self, path):
        st = os.statvfs(self.path(path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                  "f_files", "f_flag", "f_frsize", "f_namemax")}

    # Files
    def open(self, path, flags):
        if os.path.basename(path).startswith("slow"):
            time.sleep(self.open_delay)
        return os.open(self.path(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self.path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

    def read(self, path, size, offset, fh):
        if offset == 0 and os.path.basename(path).startswith("slow"):
            time.sleep(self.read_delay)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        time.sleep(self.write_delay)
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        if fh is None:
            os.truncate(self.path(path), length)
        else:
            os.ftruncate(fh, length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)

    def fsync(self, path, datasync, fh):
        time.sleep(self.fsync_delay)
        os.fsync(fh)

    def fsyncdir(self, path, datasync, fh):
        time.sleep(self.fsync_delay)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--fsync", type=float, default=0)
    parser.add_argument("--readdir", type=float, default=0)
    parser.add_argument("--lookup", type=float, default=0)
    parser.add_argument("--read", type=float, default=0)
    parser.add_argument("--open", type=float, default=0)
    parser.add_argument("--write", type=float, default=0)
    options = parser.parse_args()
    FUSE(SlowDisk(os.path.abspath(options.backing), options.fsync, options.readdir, options.lookup, options.read, options.open,
                  options.write),
         options.mountpoint,
         # big_writes: a write reaches write() as the server made it (64 KiB), not in pieces of 4 KiB
         # that each sleep, which made a 1 MiB upload at 0.2 s per write take 51 s, not 3.
         foreground=True, allow_other=True, default_permissions=True, nothreads=False, big_writes=True, max_write=1 << 20)
