package httpx

import "net/http"

// Read is the skeleton of a read endpoint: it accepts only the query
// parameters allowed (C-9; none when allowed is empty), calls read with
// them and writes what read returns with 200, or the first error in the
// envelope (C-6). read runs only when the query is valid.
func Read[T any](w http.ResponseWriter, r *http.Request, allowed []string, read func(q map[string]string) (T, error)) {
	q, err := Query(r, allowed...)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	data, err := read(q)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	WriteData(w, r, http.StatusOK, data)
}
