#!/usr/bin/env bash
# Mounts the bundled demo file and shows h5fs at work with ordinary tools.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mnt=$(mktemp -d /tmp/h5fs-demo.XXXXXX)
work=$(mktemp -d /tmp/h5fs-demo-edit.XXXXXX)
trap 'h5fs umount "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true; rmdir "$mnt"; rm -rf "$work"' EXIT
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

printf '\n# edits: a copy of the demo file mounted read-write\n'
cp demo/demo.h5 "$work/demo.h5"
h5fs mount "$work/demo.h5" "$mnt"
run "python3 -c \"import numpy as np; a = np.lib.format.open_memmap('$mnt/climate/temperature.npy', mode='r+'); a[0, 0, :4] = [-1, -2, -3, -4]; a.flush()\""
run "printf 'Edited by h5fs:  ' | dd of=$mnt/notes conv=notrunc status=none; cat $mnt/notes"
run "mkdir $mnt/results"
run "python3 -c \"import numpy as np; np.save('$work/mean.npy', np.load('$mnt/climate/temperature.npy').mean(axis=0))\"; cp $work/mean.npy $mnt/results/"
run "setfattr -n user.method -v 'mean over time' $mnt/results/mean; mv $mnt/results/mean.npy $mnt/results/time_mean.npy"
run "ls -l $mnt/results; getfattr --absolute-names -d $mnt/results/time_mean"
run "h5fs umount $mnt"
run "h5fs check $work/demo.h5"
run "python3 -c \"import h5py; f = h5py.File('$work/demo.h5'); print(f['climate/temperature'][0, 0, :6]); print(f['notes'][()].tobytes().decode()); r = f['results/time_mean']; print(r.shape, r.dtype, dict(r.attrs))\""
