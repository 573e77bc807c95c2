! scrf.h: the SCR Fortran interface (SCR 3 user guide, section 2.5),
! implemented by scr-rs (libscrf, over libscr). Valid as fixed-form
! and free-form source:  include 'scrf.h'  (or, with explicit
! interfaces, "use scr" instead; never both in one scope).
!
! Every SCR_* call is a subroutine whose last argument is INTEGER
! IERROR (SCR_SUCCESS on success), e.g.
!   CALL SCR_INIT(IERROR)
!   CALL SCR_ROUTE_FILE(NAME, FILE, IERROR)
!   CALL SCR_CONFIG(CONFIG, VAL, IERROR)
! scr-rs adds SCR_ROUTE_SHARED_FILE(NAME, FILE, IERROR),
! SCR_RESTART_INFO(RANKS, NFILES, IERROR) and
! SCR_RESTART_FILE(I, NAME, WRITER, IERROR) (I from 0, as in C).
! Strings: trailing blanks of input strings are ignored; results are
! blank-padded. A result longer than its variable fails the call
! (declare CHARACTER(LEN=SCR_MAX_FILENAME)). Flags add up:
! SCR_FLAG_CHECKPOINT + SCR_FLAG_OUTPUT. INTEGER is the default
! 4-byte kind (do not compile with -fdefault-integer-8).
!
! return code
      INTEGER SCR_SUCCESS
      PARAMETER (SCR_SUCCESS=0)
! length of the names and paths SCR returns
      INTEGER SCR_MAX_FILENAME
      PARAMETER (SCR_MAX_FILENAME=1024)
! dataset flags for SCR_START_OUTPUT
      INTEGER SCR_FLAG_NONE
      PARAMETER (SCR_FLAG_NONE=0)
      INTEGER SCR_FLAG_CHECKPOINT
      PARAMETER (SCR_FLAG_CHECKPOINT=1)
      INTEGER SCR_FLAG_OUTPUT
      PARAMETER (SCR_FLAG_OUTPUT=2)
