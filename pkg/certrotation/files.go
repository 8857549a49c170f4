package certrotation

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// writeCertFiles puts the serving key and certificate into dir, the key
// first: controller-runtime's certwatcher reloads on either file's change and
// keeps the previous pair while the two do not match yet.
func writeCertFiles(dir, certName, keyName string, a artifacts) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the certificate directory: %w", err)
	}
	return errors.Join(
		writeFileAtomic(filepath.Join(dir, keyName), a.Key, 0o600),
		writeFileAtomic(filepath.Join(dir, certName), a.Cert, 0o644),
	)
}

// writeFileAtomic replaces path with data through a temporary file in the same
// directory and a rename, so a reader sees the old or the new content, never
// a part. It writes nothing when path already holds data, which is also how a
// read-only directory (a Secret volume the kubelet keeps in sync) passes once
// its content has caught up.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
