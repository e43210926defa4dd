#!/usr/bin/env bash
# Mounts the bundled demo file and shows h5fs at work with ordinary tools.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mnt=$(mktemp -d /tmp/h5fs-demo.XXXXXX)
work=$(mktemp -d /tmp/h5fs-demo-edit.XXXXXX)
srv=
trap 'h5fs umount "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true; rmdir "$mnt"; [ -z "$srv" ] || kill "$srv"; rm -rf "$work"' EXIT
h5fs mount -o ro demo/demo.h5 "$mnt"
run() { printf '\n$ %s\n' "$*"; eval "$@"; }
run "ls -l $mnt $mnt/climate"
run "readlink $mnt/latest"
run "cat $mnt/notes"
run "getfattr --absolute-names -d $mnt/climate"
for fact in dtype chunks filters storage_size; do
    run "getfattr --absolute-names -n user.h5fs.$fact $mnt/climate/temperature"
done
run "od -A d -t f4 -N 16 $mnt/climate/temperature"
run "du -k --apparent-size $mnt/climate/temperature; du -k $mnt/climate/temperature"
run "python3 -c \"import numpy as np; a = np.load('$mnt/climate/temperature.npy'); print(a.shape, a.dtype, a.mean())\""
h5fs umount "$mnt"

printf '\n# as a system filesystem: mount(8), findmnt, h5fs status, umount(8)\n'
run "mount -t fuse.h5fs demo/demo.h5 $mnt -o ro,uid=nobody,umask=022"
run "findmnt $mnt; ls -ln $mnt/climate | head -3"
run "h5fs status $mnt"
run "umount $mnt"

printf '\n# the same file on a web server (a loopback HTTP server answering ranges, 20 ms a request), mounted by its URL\n'
mkdir "$work/www" && cp demo/demo.h5 "$work/www/"
python3 tests/servers.py http "$work/www" --latency 0.02 > "$work/url" & srv=$!
for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
url="$(head -1 "$work/url")/demo.h5"
run "h5fs mount -o cache_dir=$work/cache $url $mnt"
run "findmnt -n -o SOURCE,FSTYPE,OPTIONS $mnt; getfattr --absolute-names -d $mnt/climate/temperature"
run "python3 -c \"import numpy as np; a = np.load('$mnt/climate/temperature.npy'); print(a.shape, a.dtype, a.mean())\""
run "touch $mnt/new 2>&1 || true"
run "h5fs status $mnt | grep -E 'remote|block cache'"
run "h5fs umount $mnt"
kill "$srv"; srv=

printf '\n# edits: a copy of the demo file mounted read-write\n'
cp demo/demo.h5 "$work/demo.h5"
h5fs mount "$work/demo.h5" "$mnt"
run "python3 -c \"import numpy as np; a = np.lib.format.open_memmap('$mnt/climate/temperature.npy', mode='r+'); a[0, 0, :4] = [-1, -2, -3, -4]; a.flush()\""
run "printf 'Edited by h5fs:  ' | dd of=$mnt/notes conv=notrunc status=none; cat $mnt/notes"
run "mkdir $mnt/results"
run "python3 -c \"import numpy as np; np.save('$work/mean.npy', np.load('$mnt/climate/temperature.npy').mean(axis=0))\"; cp $work/mean.npy $mnt/results/"
run "setfattr -n user.method -v 'mean over time' $mnt/results/mean; h5fs attr $mnt/results/mean window '[0, 24]' --dtype u2; mv $mnt/results/mean.npy $mnt/results/time_mean.npy"
run "ls -l $mnt/results; getfattr --absolute-names -d $mnt/results/time_mean"
printf '\n# a sparse dataset: only the defined elements are stored\n'
run "h5fs create $mnt/results/hot --sparse --shape 2000,2000 --dtype f4 --chunks 500,500 --filters values=gzip:4"
run "python3 -c \"import numpy as np; t = np.load('$mnt/climate/temperature.npy')[0]; dt = np.dtype([('index', '<u8', (2,)), ('value', '<f4')]); p = np.zeros(3, dt); p['index'] = [[0, 0], [1234, 567], [1999, 1999]]; p['value'] = t.ravel()[:3]; np.save('$work/hot.npy', p)\"; cp $work/hot.npy $mnt/results/hot.points.npy"
run "printf '\\x00\\x00\\x80\\x3f' | dd of=$mnt/results/hot bs=4 seek=$((10 * 2000 + 20)) conv=notrunc status=none"
run "python3 -c \"import numpy as np; print(np.load('$mnt/results/hot.points.npy'))\"; ls -ls $mnt/results"
for fact in layout defined filters; do
    run "getfattr --absolute-names -n user.h5fs.$fact $mnt/results/hot"
done
run "h5fs umount $mnt"
run "h5fs check $work/demo.h5"
run "python3 -c \"import h5py; f = h5py.File('$work/demo.h5'); print(f['climate/temperature'][0, 0, :6]); print(f['notes'][()].tobytes().decode()); r = f['results/time_mean']; print(r.shape, r.dtype, dict(r.attrs))\""
