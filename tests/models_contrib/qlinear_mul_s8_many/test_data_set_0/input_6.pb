BcsJ=
×>