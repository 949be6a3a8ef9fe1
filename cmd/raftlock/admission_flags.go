package main

import "github.com/raftlock/raftlock/httpapi"

// admissionFlags are serve's --admission* flags.
type admissionFlags struct {
	httpapi.Admission
	on bool
}

// options is what httpapi takes.
func (f admissionFlags) options() httpapi.Admission {
	a := f.Admission
	a.Disabled = !f.on
	return a
}
