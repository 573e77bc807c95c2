! A Fortran MPI application (use mpi) that knows nothing of SCR: stream-unformatted checkpoint
! files ckpt.<step>/rank_<r>.dat, a "latest" pointer renamed into place with the RENAME
! intrinsic, restart verified element by element. Usage: ckpt_fortran DIR STEPS [CRASH_AT]
program ckpt_fortran
  use mpi
  implicit none
  integer, parameter :: n = 20000
  integer :: ierr, rank, nranks, step, start, steps, crash_at, u, ios, i
  integer :: ok, allok
  integer(kind=4) :: buf(n), got(n)
  character(len=1024) :: dir, arg, path, latest
  logical :: there

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, dir)
  call get_command_argument(2, arg)
  read (arg, *) steps
  crash_at = -1
  if (command_argument_count() > 2) then
    call get_command_argument(3, arg)
    read (arg, *) crash_at
  end if
  latest = trim(dir)//'/latest'

  start = 0
  inquire (file=trim(latest), exist=there)
  if (there) then
    open (newunit=u, file=trim(latest), status='old', action='read')
    read (u, *) start
    close (u)
  end if
  if (start > 0) then
    call fill(start)
    ok = 0
    write (path, '(a,"/ckpt.",i0,"/rank_",i0,".dat")') trim(dir), start, rank
    inquire (file=trim(path), exist=there)
    if (there) then
      ! no ACTION=, as most Fortran codes read their restart files: gfortran opens O_RDWR
      open (newunit=u, file=trim(path), access='stream', form='unformatted', status='old', iostat=ios)
      if (ios == 0) then
        read (u, iostat=ios) got
        if (ios == 0 .and. all(got == buf)) ok = 1
        close (u)
      end if
    end if
    call MPI_ALLREDUCE(ok, allok, 1, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
    if (rank == 0) then
      if (allok == 1) then
        print '("RESTARTED ",i0," verified")', start
      else
        print '("RESTARTED ",i0," CORRUPT")', start
      end if
    end if
  else if (rank == 0) then
    print '("NO_RESTART")'
  end if

  do step = start + 1, steps
    if (step == crash_at .and. rank == nranks - 1) call exit(9)
    call MPI_BARRIER(MPI_COMM_WORLD, ierr)
    if (mod(step, 2) == 0) then
      if (rank == 0) then
        write (path, '(a,"/ckpt.",i0)') trim(dir), step
        call execute_command_line('mkdir -p '//trim(path))
      end if
      call MPI_BARRIER(MPI_COMM_WORLD, ierr)
      call fill(step)
      write (path, '(a,"/ckpt.",i0,"/rank_",i0,".dat")') trim(dir), step, rank
      open (newunit=u, file=trim(path), access='stream', form='unformatted', status='replace', action='write')
      write (u) buf
      close (u)
      call MPI_BARRIER(MPI_COMM_WORLD, ierr)
      if (rank == 0) then
        open (newunit=u, file=trim(latest)//'.tmp', status='replace', action='write')
        write (u, '(i0)') step
        close (u)
        call rename(trim(latest)//'.tmp', trim(latest))
        print '("CHECKPOINT ",i0)', step
      end if
    end if
  end do
  if (rank == 0) print '("DONE")'
  call MPI_FINALIZE(ierr)

contains
  subroutine fill(s)
    integer, intent(in) :: s
    do i = 1, n
      buf(i) = i * 7 + s * 1000 + rank * 13
    end do
  end subroutine fill
end program ckpt_fortran
